# HDF5 for checkpoints (src/io/koptim_Checkpoint.cpp), by koptim_ENABLE_HDF5:
#   AUTO (default) when a parallel HDF5 (MPI-IO) is found; ON: required; OFF: never.
# Sets KOPTIM_ENABLE_HDF5 (0/1, for koptim_config.hpp) and, when 1, HDF5_C_INCLUDE_DIRS,
# HDF5_C_LIBRARIES, the target koptim::HDF5 that libkoptim links (cmake/koptimDependencies.cmake),
# and for koptimConfig.cmake: KOPTIM_HDF5_LIBRARIES (the link line), KOPTIM_HDF5_TARGETS (the
# targets it names, which a consumer must define again: an HDF5 found through its own CMake
# config) and KOPTIM_HDF5_DIR (that config's directory, a hint). Debian: libhdf5-openmpi-dev
# (cmake/setup-debian.sh).
include_guard(GLOBAL)

set(KOPTIM_ENABLE_HDF5 0)
if(NOT koptim_ENABLE_HDF5 MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "koptim_ENABLE_HDF5=${koptim_ENABLE_HDF5} is not allowed; allowed: AUTO, ON, OFF")
endif()
if(NOT koptim_ENABLE_HDF5 STREQUAL "OFF")
  enable_language(C)  # FindHDF5 checks its C wrapper with a C compiler
  set(HDF5_PREFER_PARALLEL TRUE)
  find_package(HDF5 COMPONENTS C QUIET)
  if(HDF5_FOUND AND HDF5_IS_PARALLEL)
    set(KOPTIM_ENABLE_HDF5 1)
  elseif(koptim_ENABLE_HDF5 STREQUAL "ON")
    message(FATAL_ERROR "koptim_ENABLE_HDF5=ON but no parallel HDF5 was found (found: ${HDF5_FOUND}, parallel: "
                        "${HDF5_IS_PARALLEL}); on Debian install libhdf5-openmpi-dev, elsewhere set HDF5_ROOT")
  endif()
endif()
set(KOPTIM_HDF5_LIBRARIES "")
set(KOPTIM_HDF5_TARGETS "")
set(KOPTIM_HDF5_DIR "")
if(KOPTIM_ENABLE_HDF5)
  _koptim_hdf5_target("${HDF5_C_LIBRARIES}" INCLUDE_DIRS ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS}
                      DEFINITIONS ${HDF5_C_DEFINITIONS} ${HDF5_DEFINITIONS})
  set(KOPTIM_HDF5_LIBRARIES "${HDF5_C_LIBRARIES}")
  foreach(_koptim_l IN LISTS HDF5_C_LIBRARIES)
    if(TARGET "${_koptim_l}")
      list(APPEND KOPTIM_HDF5_TARGETS ${_koptim_l})
    endif()
  endforeach()
  if(KOPTIM_HDF5_TARGETS AND HDF5_DIR)
    set(KOPTIM_HDF5_DIR "${HDF5_DIR}")
  endif()
endif()
message(STATUS "koptim: HDF5 checkpoints ${KOPTIM_ENABLE_HDF5} (koptim_ENABLE_HDF5=${koptim_ENABLE_HDF5}, "
               "HDF5 ${HDF5_VERSION} found: ${HDF5_FOUND}, parallel: ${HDF5_IS_PARALLEL})")
