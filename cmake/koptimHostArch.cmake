# Host architecture flags for koptim's own code (the library, its tests, examples and benchmarks;
# never passed on to the projects that link koptim).
#   koptim_HOST_ARCH = none    nothing added (the default: a library that runs wherever its
#                              compiler's baseline runs)
#                      native  -march=native -ffp-contract=off, where the Kokkos in use brings no
#                              architecture of its own (Kokkos_ARCH empty, as in Debian's generic
#                              Kokkos 3.4) and no device backend; a Kokkos built with Kokkos_ARCH_*
#                              flags, or with CUDA, HIP or SYCL, keeps its own (the presets that
#                              build the demo and the benchmarks set native)
#                      <flags> these flags, as given
# -ffp-contract=off is added in every case where the compiler takes it, architecture flags or
# not: no fused multiply-add is formed where the source has a multiplication and an addition, so
# the vector units change the speed and never the numbers (a checkpoint resumes bitwise on
# another build; the torch reference and the N-rank tests compare exactly). Without it, GCC
# contracts by default once an architecture with FMA is on (a Kokkos built with Kokkos_ARCH_*
# passes -march), and a vectorized loop and its scalar remainder then round differently: a
# sharded optimizer, whose slices start at other elements, stopped matching one process bitwise
# (measured with Kokkos 4.6 and Kokkos_ARCH_NATIVE). Device code (nvcc) keeps its own default.
# Sets KOPTIM_HOST_ARCH_FLAGS (a list, maybe empty) and KOPTIM_HOST_ARCH_REASON.
include_guard(GLOBAL)
include(CheckCXXCompilerFlag)

set(KOPTIM_HOST_ARCH_FLAGS "")
set(_koptim_device_backend FALSE)
foreach(_d IN ITEMS CUDA HIP SYCL)
  if(Kokkos_ENABLE_${_d} OR "${_d}" IN_LIST Kokkos_DEVICES)
    set(_koptim_device_backend TRUE)
  endif()
endforeach()
string(TOLOWER "${koptim_HOST_ARCH}" _koptim_arch)
if(_koptim_arch STREQUAL "none" OR _koptim_arch STREQUAL "")
  set(KOPTIM_HOST_ARCH_REASON "none requested")
elseif(_koptim_arch STREQUAL "native")
  if(NOT "${Kokkos_ARCH}" STREQUAL "")
    set(KOPTIM_HOST_ARCH_REASON "none: Kokkos brings its architecture (${Kokkos_ARCH})")
  elseif(_koptim_device_backend)
    set(KOPTIM_HOST_ARCH_REASON "none: Kokkos has a device backend")
  else()
    check_cxx_compiler_flag("-march=native -ffp-contract=off" KOPTIM_COMPILER_HAS_MARCH_NATIVE)
    if(KOPTIM_COMPILER_HAS_MARCH_NATIVE)
      set(KOPTIM_HOST_ARCH_FLAGS -march=native -ffp-contract=off)
      set(KOPTIM_HOST_ARCH_REASON "-march=native -ffp-contract=off (Kokkos brings no architecture)")
    else()
      set(KOPTIM_HOST_ARCH_REASON "none: ${CMAKE_CXX_COMPILER_ID} does not take -march=native")
    endif()
  endif()
else()
  separate_arguments(KOPTIM_HOST_ARCH_FLAGS UNIX_COMMAND "${koptim_HOST_ARCH}")
  # Flags the compiler refuses (a typo, "nativ") would stop the build at its first file: here.
  # The check's cached result is named by a hash of the exact flags (a typo and its correction map
  # to one C identifier, which would keep the first result).
  string(MD5 _koptim_flags_hash "${koptim_HOST_ARCH}")
  set(_koptim_flags_ok "KOPTIM_COMPILER_TAKES_${_koptim_flags_hash}")
  check_cxx_compiler_flag("${koptim_HOST_ARCH}" ${_koptim_flags_ok})
  if(NOT ${_koptim_flags_ok})
    message(FATAL_ERROR "koptim_HOST_ARCH=${koptim_HOST_ARCH}: the compiler (${CMAKE_CXX_COMPILER}) does not take "
                        "these flags; allowed: none, native, or flags the compiler takes (e.g. -march=skylake-avx512)")
  endif()
  set(KOPTIM_HOST_ARCH_REASON "${koptim_HOST_ARCH} (as given)")
endif()
message(STATUS "koptim host architecture flags: ${KOPTIM_HOST_ARCH_REASON}")
if(NOT "-ffp-contract=off" IN_LIST KOPTIM_HOST_ARCH_FLAGS)
  check_cxx_compiler_flag("-ffp-contract=off" KOPTIM_COMPILER_HAS_FP_CONTRACT_OFF)
  if(KOPTIM_COMPILER_HAS_FP_CONTRACT_OFF)
    list(APPEND KOPTIM_HOST_ARCH_FLAGS -ffp-contract=off)
    message(STATUS "koptim floating-point contraction: off (-ffp-contract=off)")
  else()
    message(STATUS "koptim floating-point contraction: the compiler's default (${CMAKE_CXX_COMPILER_ID} does not take -ffp-contract=off)")
  endif()
endif()
