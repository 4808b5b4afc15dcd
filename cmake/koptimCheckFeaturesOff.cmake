# ctest helper: every optional feature can be turned off at configure time. Configures the
# source tree into a scratch folder with HDF5, NCCL, the host architecture flags, the examples,
# tests and benchmarks off, and checks what the configuration recorded (koptim_config.hpp, the
# cache). Run with -DSOURCE_DIR=... -DWORK=... (-DGENERATOR=...).
file(REMOVE_RECURSE "${WORK}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK} -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
          -Dkoptim_ENABLE_HDF5=OFF -Dkoptim_ENABLE_NCCL=OFF -Dkoptim_HOST_ARCH=none -Dkoptim_ENABLE_EXAMPLES=OFF
          -Dkoptim_ENABLE_TESTS=OFF -Dkoptim_ENABLE_BENCHMARK=OFF -Dkoptim_ENABLE_FUZZ=OFF
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring with every feature off failed:\n${out}\n${err}")
endif()
file(READ ${WORK}/include/koptim_config.hpp config)
foreach(expected "#define KOPTIM_ENABLE_HDF5 0" "#define KOPTIM_ENABLE_NCCL 0")
  string(FIND "${config}" "${expected}" where)
  if(where EQUAL -1)
    message(FATAL_ERROR "koptim_config.hpp lacks '${expected}'")
  endif()
endforeach()
string(FIND "${out}" "koptim host architecture flags: none requested" where)
if(where EQUAL -1)
  message(FATAL_ERROR "koptim_HOST_ARCH=none did not take effect:\n${out}")
endif()
foreach(target example unit_tests perf_tests fuzz)
  if(EXISTS ${WORK}/${target}/Makefile OR EXISTS ${WORK}/${target}/build.ninja)
    message(FATAL_ERROR "${target} was configured although it was turned off")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "every optional feature turned off: configured")
