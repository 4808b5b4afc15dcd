# HDF5 for checkpoints (src/io/koptim_Checkpoint.cpp), by koptim_ENABLE_HDF5:
#   AUTO (default) when a parallel HDF5 (MPI-IO) is found; ON: required; OFF: never.
# Sets KOPTIM_ENABLE_HDF5 (0/1, for koptim_config.hpp) and, when 1, HDF5_C_INCLUDE_DIRS and
# HDF5_C_LIBRARIES. Debian: libhdf5-openmpi-dev (cmake/setup-debian.sh).
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
message(STATUS "koptim: HDF5 checkpoints ${KOPTIM_ENABLE_HDF5} (koptim_ENABLE_HDF5=${koptim_ENABLE_HDF5}, "
               "HDF5 ${HDF5_VERSION} found: ${HDF5_FOUND}, parallel: ${HDF5_IS_PARALLEL})")
