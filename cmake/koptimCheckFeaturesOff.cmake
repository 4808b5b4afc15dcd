# ctest helper: every optional feature can be turned off at configure time. Run with
# -DSOURCE_DIR=... -DWORK=... (-DGENERATOR=...).
#
# 1. Everything off at once (HDF5, NCCL, the host architecture flags, the examples, tests and
#    benchmarks): configures, and the configuration records it (koptim_config.hpp, the folders).
# 2. HDF5 off alone, with the tests, examples and benchmarks on (a machine without a parallel
#    HDF5): configures without the checkpoint tests and benchmark, and the library's checkpoint
#    source, whose functions then throw a ConfigError, compiles without a warning (its compile
#    command from compile_commands.json: the same flags as the library's build).
# 3. NCCL off alone, with the tests on, where NCCL is installed: no NCCL test (the compile check
#    of the NCCL backend that AUTO adds where Kokkos has no CUDA included).
function(koptim_configure dir out_var)
  file(REMOVE_RECURSE "${dir}")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${dir} -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
                          ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring with ${ARGN} failed:\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(koptim_expect_config dir expected)
  file(READ ${dir}/include/koptim_config.hpp config)
  string(FIND "${config}" "${expected}" where)
  if(where EQUAL -1)
    message(FATAL_ERROR "${dir}/include/koptim_config.hpp lacks '${expected}'")
  endif()
endfunction()

# 1. Everything off.
set(all_off ${WORK}/all_off)
koptim_configure(${all_off} out -Dkoptim_ENABLE_HDF5=OFF -Dkoptim_ENABLE_NCCL=OFF -Dkoptim_HOST_ARCH=none
                 -Dkoptim_ENABLE_EXAMPLES=OFF -Dkoptim_ENABLE_TESTS=OFF -Dkoptim_ENABLE_BENCHMARK=OFF
                 -Dkoptim_ENABLE_FUZZ=OFF)
koptim_expect_config(${all_off} "#define KOPTIM_ENABLE_HDF5 0")
koptim_expect_config(${all_off} "#define KOPTIM_ENABLE_NCCL 0")
string(FIND "${out}" "koptim host architecture flags: none requested" where)
if(where EQUAL -1)
  message(FATAL_ERROR "koptim_HOST_ARCH=none did not take effect:\n${out}")
endif()
foreach(target example unit_tests perf_tests fuzz)
  if(EXISTS ${all_off}/${target}/Makefile OR EXISTS ${all_off}/${target}/build.ninja)
    message(FATAL_ERROR "${target} was configured although it was turned off")
  endif()
endforeach()
message(STATUS "every optional feature turned off: configured")

# 2. HDF5 off alone.
set(no_hdf5 ${WORK}/hdf5_off)
koptim_configure(${no_hdf5} out -Dkoptim_ENABLE_HDF5=OFF -Dkoptim_ENABLE_TESTS=ON -Dkoptim_ENABLE_EXAMPLES=ON
                 -Dkoptim_ENABLE_BENCHMARK=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
koptim_expect_config(${no_hdf5} "#define KOPTIM_ENABLE_HDF5 0")
file(READ ${no_hdf5}/unit_tests/CTestTestfile.cmake tests)
file(READ ${no_hdf5}/perf_tests/CTestTestfile.cmake perf)
string(APPEND tests "${perf}")
foreach(name koptim_checkpoint koptim_digits_shampoo_restart_equals_run koptim_perf_checkpoint_smoke)
  string(FIND "${tests}" "add_test(${name}" where)
  if(NOT where EQUAL -1)
    message(FATAL_ERROR "the test ${name} needs HDF5 but was added with koptim_ENABLE_HDF5=OFF")
  endif()
endforeach()
string(FIND "${tests}" "add_test(koptim_core" where)
if(where EQUAL -1)
  message(FATAL_ERROR "koptim_ENABLE_HDF5=OFF left out tests that do not need HDF5 (no koptim_core)")
endif()
# The entry of the checkpoint source (a regular expression, not string(JSON): CMake 3.16 is enough;
# not file(STRINGS): a list would merge the lines between JSON's brackets).
file(READ ${no_hdf5}/compile_commands.json commands)
string(REGEX MATCH "\"directory\": \"([^\"]*)\",[ \r\n]*\"command\": \"([^\r\n]*) -c [^\r\n]*/src/io/koptim_Checkpoint\\.cpp\","
       entry "${commands}")
if(entry STREQUAL "")
  message(FATAL_ERROR "no compile command for src/io/koptim_Checkpoint.cpp in ${no_hdf5}/compile_commands.json")
endif()
set(directory "${CMAKE_MATCH_1}")
set(command "${CMAKE_MATCH_2} -c ${SOURCE_DIR}/src/io/koptim_Checkpoint.cpp")
# The object into the scratch folder (Ninja creates the object folders only when it builds).
string(REGEX REPLACE " -o [^ ]+" " -o ${WORK}/koptim_Checkpoint_without_hdf5.o" command "${command}")
string(REPLACE "\\\"" "\"" command "${command}")
string(REPLACE "\\\\" "\\" command "${command}")
separate_arguments(command UNIX_COMMAND "${command}")
execute_process(COMMAND ${command} WORKING_DIRECTORY ${directory} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT "${out}${err}" STREQUAL "")
  message(FATAL_ERROR "src/io/koptim_Checkpoint.cpp without HDF5: rc ${rc}\n${out}\n${err}")
endif()
message(STATUS "HDF5 turned off alone: configured with the tests, checkpoint source compiled")

# 3. NCCL off alone.
set(no_nccl ${WORK}/nccl_off)
koptim_configure(${no_nccl} out -Dkoptim_ENABLE_NCCL=OFF -Dkoptim_ENABLE_TESTS=ON -Dkoptim_ENABLE_EXAMPLES=OFF
                 -Dkoptim_ENABLE_BENCHMARK=OFF)
koptim_expect_config(${no_nccl} "#define KOPTIM_ENABLE_NCCL 0")
file(READ ${no_nccl}/unit_tests/CTestTestfile.cmake tests)
# add_test(koptim_nccl_np1 ...), add_test([=[koptim_nccl_np1]=] ...) in newer CMake versions
string(REGEX MATCH "add_test\\((\\[=\\[)?(koptim_nccl[a-z0-9_]*)" found "${tests}")
if(found)
  message(FATAL_ERROR "koptim_ENABLE_NCCL=OFF still added the test ${CMAKE_MATCH_2}")
endif()
message(STATUS "NCCL turned off alone: configured with the tests, no NCCL test")
file(REMOVE_RECURSE "${WORK}")
