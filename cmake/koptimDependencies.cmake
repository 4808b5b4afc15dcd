# Finds koptim's dependencies and hides the differences between the two worlds koptim is
# built in behind targets of its own:
#   koptim::Kokkos, koptim::KokkosKernels, koptim::Teuchos
# (a) Debian's Trilinos 13.2 (Kokkos 3.4): Kokkos::kokkos carries the non-existent include
#     path <prefix>/lib/include, Kokkos Kernels and Teuchos export variables, not targets.
# (b) A standalone Kokkos >= 4 and Kokkos Kernels >= 4 with proper imported targets
#     (Kokkos_ROOT / KokkosKernels_ROOT), plus a standalone or Trilinos Teuchos.
# This file is installed with koptim and included by koptimConfig.cmake, so consumers get the
# same targets. Imported targets are visible in the directory that made them only: a consumer
# whose sibling directories each call find_package(koptim) gets them in each (DIRECTORY guard).
include_guard(DIRECTORY)
include(CMakeFindDependencyMacro)

macro(_koptim_find_dependency)
  if(KOPTIM_FINDING_FOR_CONSUMER)
    find_dependency(${ARGN})
  else()
    find_package(${ARGN} REQUIRED)
  endif()
endmacro()

# True when every directory in the list exists.
function(_koptim_dirs_exist out)
  set(ok TRUE)
  foreach(d IN LISTS ARGN)
    if(d MATCHES "^\\$<" OR d STREQUAL "")
      continue()
    endif()
    if(NOT EXISTS "${d}")
      set(ok FALSE)
    endif()
  endforeach()
  set(${out} ${ok} PARENT_SCOPE)
endfunction()

function(_koptim_realpaths out)
  set(result "")
  foreach(d IN LISTS ARGN)
    get_filename_component(r "${d}" REALPATH)
    list(APPEND result "${r}")
  endforeach()
  list(REMOVE_DUPLICATES result)
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# The libraries a TriBITS package exports as variables (<pkg>_LIBRARIES, <pkg>_LIBRARY_DIRS):
# imported targets where they exist, else files found in the package's library directories.
function(_koptim_package_libraries out pkg)
  set(result "")
  foreach(l IN LISTS ${pkg}_LIBRARIES)
    if(TARGET ${l})
      list(APPEND result ${l})
    else()
      find_library(_koptim_lib_${l} NAMES ${l} HINTS ${${pkg}_LIBRARY_DIRS})
      if(NOT _koptim_lib_${l})
        message(FATAL_ERROR "koptim: library '${l}' of ${pkg} not found in ${pkg}_LIBRARY_DIRS (${${pkg}_LIBRARY_DIRS})")
      endif()
      list(APPEND result ${_koptim_lib_${l}})
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# --- MPI --------------------------------------------------------------------------------------
_koptim_find_dependency(MPI COMPONENTS CXX)

# --- Kokkos -----------------------------------------------------------------------------------
_koptim_find_dependency(Kokkos CONFIG)
if(NOT TARGET koptim::Kokkos)
  add_library(koptim::Kokkos INTERFACE IMPORTED)
  set(_koptim_kokkos_ok FALSE)
  if(TARGET Kokkos::kokkos)
    get_target_property(_incs Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT _incs)
      set(_incs "")
    endif()
    _koptim_dirs_exist(_koptim_kokkos_ok ${_incs})
  endif()
  if(_koptim_kokkos_ok)
    set_property(TARGET koptim::Kokkos PROPERTY INTERFACE_LINK_LIBRARIES Kokkos::kokkos)
    set(KOPTIM_KOKKOS_FLAVOR "imported-target")
  else()
    # Debian's Trilinos: rebuild the interface from the package variables.
    _koptim_realpaths(_incs ${Kokkos_INCLUDE_DIRS})
    _koptim_package_libraries(_libs Kokkos)
    set_target_properties(koptim::Kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_incs}"
                                                     INTERFACE_LINK_LIBRARIES "${_libs};${CMAKE_DL_LIBS}")
    set(KOPTIM_KOKKOS_FLAVOR "package-variables")
  endif()
endif()
# KOKKOS_VERSION as the C++ macro spells it (30401 for 3.4.1), checked against the headers.
math(EXPR KOPTIM_KOKKOS_VERSION_NUMBER
     "${Kokkos_VERSION_MAJOR} * 10000 + ${Kokkos_VERSION_MINOR} * 100 + ${Kokkos_VERSION_PATCH}")

# --- Kokkos Kernels ---------------------------------------------------------------------------
_koptim_find_dependency(KokkosKernels CONFIG)
if(NOT TARGET koptim::KokkosKernels)
  add_library(koptim::KokkosKernels INTERFACE IMPORTED)
  if(TARGET Kokkos::kokkoskernels)
    set_property(TARGET koptim::KokkosKernels PROPERTY INTERFACE_LINK_LIBRARIES Kokkos::kokkoskernels)
  else()
    _koptim_realpaths(_incs ${KokkosKernels_INCLUDE_DIRS})
    _koptim_package_libraries(_libs KokkosKernels)
    set_target_properties(koptim::KokkosKernels PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_incs}"
                                                            INTERFACE_LINK_LIBRARIES "koptim::Kokkos;${_libs}")
  endif()
endif()

# --- Teuchos (ParameterList, its XML and YAML readers) ----------------------------------------
# Only the parameter-list libraries are linked: Debian's full Teuchos_LIBRARIES would also drag
# in its Kokkos 3.4 compatibility layers, which must not meet a user's Kokkos 4.
_koptim_find_dependency(Teuchos CONFIG)
if(NOT TARGET koptim::Teuchos)
  add_library(koptim::Teuchos INTERFACE IMPORTED)
  if(TARGET Teuchos::all_libs)
    set_property(TARGET koptim::Teuchos PROPERTY INTERFACE_LINK_LIBRARIES Teuchos::all_libs)
  else()
    set(_libs "")
    foreach(l trilinos_teuchosparameterlist trilinos_teuchosparser trilinos_teuchoscore teuchosparameterlist
              teuchosparser teuchoscore)
      if(TARGET ${l})
        get_target_property(_loc ${l} IMPORTED_LOCATION_NONE)
        if(NOT _loc)
          get_target_property(_loc ${l} IMPORTED_LOCATION_RELEASE)
        endif()
        if(_loc)
          list(APPEND _libs "${_loc}")
        else()
          list(APPEND _libs ${l})
        endif()
      endif()
    endforeach()
    if(NOT _libs)
      set(_libs ${Teuchos_LIBRARIES})
    endif()
    # Linked as files, not as targets: the targets' link interfaces name Debian's Kokkos 3.4.
    _koptim_realpaths(_incs ${Teuchos_INCLUDE_DIRS})
    set_target_properties(koptim::Teuchos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_incs}"
                                                      INTERFACE_LINK_LIBRARIES "${_libs};MPI::MPI_CXX")
  endif()
endif()

# --- BLAS / LAPACK ----------------------------------------------------------------------------
_koptim_find_dependency(LAPACK)

# --- What libkoptim links privately: koptim::HDF5, koptim::NCCL -------------------------------
# libkoptim is a static library (BUILD_SHARED_LIBS unset), so its exported link interface carries
# what it links privately ($<LINK_ONLY:...>). It links these targets, never a file path of the
# build machine nor another package's target directly: koptim's build makes them (once
# cmake/koptimHdf5.cmake and cmake/koptimNccl.cmake have turned a feature on), and
# koptimConfig.cmake makes them again for a consumer, for the features koptim was built with,
# after finding the packages that define the targets they link (HDF5's own CMake config,
# CUDAToolkit for CUDA::cudart).

# koptim::HDF5: an HDF5 link line, as FindHDF5 gives it in HDF5_C_LIBRARIES: files (Debian's
# h5pcc wrapper) or targets such as hdf5::hdf5-shared (an HDF5 found through its own CMake config:
# Spack, Homebrew, vcpkg). Include directories and definitions: koptim's build only.
function(_koptim_hdf5_target libraries)
  cmake_parse_arguments(H "" "" "INCLUDE_DIRS;DEFINITIONS" ${ARGN})
  if(TARGET koptim::HDF5)
    return()
  endif()
  # Files recorded by koptim's build must still be there (not a link error at the consumer's build).
  foreach(l IN LISTS libraries)
    if(IS_ABSOLUTE "${l}" AND NOT EXISTS "${l}")
      set(koptim_FOUND FALSE PARENT_SCOPE)
      set(koptim_NOT_FOUND_MESSAGE "koptim was built against the HDF5 library ${l}, which no longer exists; "
                                   "rebuild koptim against the HDF5 installed now" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  add_library(koptim::HDF5 INTERFACE IMPORTED)
  target_link_libraries(koptim::HDF5 INTERFACE ${libraries})
  if(H_INCLUDE_DIRS)
    target_include_directories(koptim::HDF5 INTERFACE ${H_INCLUDE_DIRS})
  endif()
  if(H_DEFINITIONS)
    target_compile_definitions(koptim::HDF5 INTERFACE ${H_DEFINITIONS})
  endif()
endfunction()

# koptim::NCCL: the NCCL library file (nccl.h's directory for koptim's build). The CUDA runtime
# is linked separately, as CUDA::cudart.
function(_koptim_nccl_target library)
  cmake_parse_arguments(N "" "INCLUDE_DIR" "" ${ARGN})
  if(TARGET koptim::NCCL)
    return()
  endif()
  add_library(koptim::NCCL UNKNOWN IMPORTED)
  set_target_properties(koptim::NCCL PROPERTIES IMPORTED_LOCATION "${library}")
  if(N_INCLUDE_DIR)
    set_target_properties(koptim::NCCL PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${N_INCLUDE_DIR}")
  endif()
endfunction()
