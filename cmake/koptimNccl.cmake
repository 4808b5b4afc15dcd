# NCCL for the GPU data plane (src/comm/koptim_NcclCommunicator.cpp), by koptim_ENABLE_NCCL:
#   AUTO (default) when NCCL is found and Kokkos has CUDA; ON: both are required; OFF: never.
# Sets KOPTIM_ENABLE_NCCL (0/1, for koptim_config.hpp), and, whenever nccl.h and libnccl are
# found (with or without a CUDA Kokkos), KOPTIM_NCCL_FOUND, KOPTIM_NCCL_INCLUDE_DIR,
# KOPTIM_NCCL_LIBRARY and KOPTIM_CUDART_LIBRARY, which the tests use to compile the NCCL backend as
# a check where Kokkos has no CUDA (AUTO; with OFF they compile no NCCL code). When 1, the
# CUDA runtime is found as CUDA::cudart (find_package(CUDAToolkit), CMake >= 3.17) and NCCL
# becomes the target koptim::NCCL (cmake/koptimDependencies.cmake), which libkoptim links; for
# koptimConfig.cmake: KOPTIM_NCCL_LIBRARY_DIR and KOPTIM_CUDATOOLKIT_ROOT (hints where a consumer
# finds them again).
include_guard(GLOBAL)

set(_koptim_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_ROOT} $ENV{CUDA_HOME} /usr/local/cuda)
find_path(KOPTIM_NCCL_INCLUDE_DIR nccl.h HINTS ${_koptim_nccl_hints} PATH_SUFFIXES include)
find_path(KOPTIM_CUDA_INCLUDE_DIR cuda_runtime.h HINTS ${_koptim_nccl_hints} PATH_SUFFIXES include)
find_library(KOPTIM_NCCL_LIBRARY nccl HINTS ${_koptim_nccl_hints} PATH_SUFFIXES lib64 lib)
find_library(KOPTIM_CUDART_LIBRARY cudart HINTS ${_koptim_nccl_hints} PATH_SUFFIXES lib64 lib)
set(KOPTIM_NCCL_FOUND FALSE)
if(KOPTIM_NCCL_INCLUDE_DIR AND KOPTIM_CUDA_INCLUDE_DIR AND KOPTIM_NCCL_LIBRARY AND KOPTIM_CUDART_LIBRARY)
  set(KOPTIM_NCCL_FOUND TRUE)
endif()

set(_koptim_kokkos_cuda FALSE)
if(Kokkos_ENABLE_CUDA OR "CUDA" IN_LIST Kokkos_DEVICES)
  set(_koptim_kokkos_cuda TRUE)
endif()

set(KOPTIM_ENABLE_NCCL 0)
if(koptim_ENABLE_NCCL STREQUAL "ON")
  if(NOT KOPTIM_NCCL_FOUND)
    message(FATAL_ERROR "koptim_ENABLE_NCCL=ON but NCCL was not found (nccl.h, libnccl, cuda_runtime.h, libcudart); "
                        "set NCCL_ROOT")
  endif()
  if(NOT _koptim_kokkos_cuda)
    message(FATAL_ERROR "koptim_ENABLE_NCCL=ON but Kokkos was built without CUDA (devices: ${Kokkos_DEVICES})")
  endif()
  set(KOPTIM_ENABLE_NCCL 1)
elseif(koptim_ENABLE_NCCL STREQUAL "AUTO")
  if(KOPTIM_NCCL_FOUND AND _koptim_kokkos_cuda)
    set(KOPTIM_ENABLE_NCCL 1)
  endif()
elseif(NOT koptim_ENABLE_NCCL STREQUAL "OFF")
  message(FATAL_ERROR "koptim_ENABLE_NCCL=${koptim_ENABLE_NCCL} is not allowed; allowed: AUTO, ON, OFF")
endif()
set(KOPTIM_NCCL_LIBRARY_DIR "")
set(KOPTIM_CUDATOOLKIT_ROOT "")
if(KOPTIM_ENABLE_NCCL)
  if(CMAKE_VERSION VERSION_LESS 3.17)
    message(FATAL_ERROR "the NCCL backend needs CMake 3.17 or later (FindCUDAToolkit, for CUDA::cudart); "
                        "this is ${CMAKE_VERSION}, or set koptim_ENABLE_NCCL=OFF")
  endif()
  find_package(CUDAToolkit REQUIRED)  # CUDAToolkit_ROOT picks another toolkit
  _koptim_nccl_target("${KOPTIM_NCCL_LIBRARY}" INCLUDE_DIR "${KOPTIM_NCCL_INCLUDE_DIR}")
  get_filename_component(KOPTIM_NCCL_LIBRARY_DIR "${KOPTIM_NCCL_LIBRARY}" DIRECTORY)
  get_filename_component(KOPTIM_CUDATOOLKIT_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
message(STATUS "koptim: NCCL backend ${KOPTIM_ENABLE_NCCL} (koptim_ENABLE_NCCL=${koptim_ENABLE_NCCL}, NCCL found: "
               "${KOPTIM_NCCL_FOUND}, Kokkos CUDA: ${_koptim_kokkos_cuda})")
