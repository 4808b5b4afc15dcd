# koptim_add_test(NAME <name> SOURCES <files...> [RANKS <n...>] [TIMEOUT <s>] [LIBS <libs...>] [BUILD_ONLY])
# Builds one GoogleTest program with koptim's test main and registers it with ctest once per
# rank count (RANKS 1 2 3 runs it under mpiexec at 1, 2 and 3 ranks; without RANKS it runs
# as a plain single-process program). mpiexec gets --oversubscribe (more ranks than cores) and
# --allow-run-as-root (CI runs as root) when it is Open MPI. BUILD_ONLY: the program is built but
# registered by the caller (koptim_mpi_command gives the mpiexec command line).
include_guard(GLOBAL)

set(KOPTIM_MPIEXEC_EXTRA_FLAGS "" CACHE STRING "Extra flags for mpiexec in the tests")
if(NOT KOPTIM_MPIEXEC_EXTRA_FLAGS)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _koptim_mpiexec_version ERROR_QUIET)
  if(_koptim_mpiexec_version MATCHES "Open MPI|OpenRTE")
    set(KOPTIM_MPIEXEC_EXTRA_FLAGS --oversubscribe --allow-run-as-root)
  endif()
endif()

function(koptim_add_test)
  cmake_parse_arguments(T "BUILD_ONLY" "NAME;TIMEOUT" "SOURCES;RANKS;LIBS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  # Sanitizer builds (the asan preset) run 2-5x slower: koptim_gefen took more than 300 s there.
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=")
    math(EXPR T_TIMEOUT "${T_TIMEOUT} * 4")
  endif()
  add_executable(${T_NAME} ${T_SOURCES} ${PROJECT_SOURCE_DIR}/unit_tests/koptim_TestMain.cpp)
  target_link_libraries(${T_NAME} PRIVATE koptim::koptim GTest::gtest ${T_LIBS})
  # Tests may reach koptim's internal headers (src/<component>/*.hpp), which are not installed.
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(${T_NAME} PRIVATE KOPTIM_TEST_REFERENCE_DIR="${PROJECT_SOURCE_DIR}/unit_tests/reference")
  # One OpenBLAS thread: its own threads would fight the Kokkos (OpenMP) threads and MPI ranks.
  set(_env OPENBLAS_NUM_THREADS=1)
  if(T_BUILD_ONLY)
    return()
  endif()
  if(NOT T_RANKS)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${_env}")
  else()
    foreach(n IN LISTS T_RANKS)
      add_test(NAME ${T_NAME}_np${n}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${KOPTIM_MPIEXEC_EXTRA_FLAGS}
                       ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(${T_NAME}_np${n} PROPERTIES TIMEOUT ${T_TIMEOUT} PROCESSORS ${n} ENVIRONMENT "${_env}")
    endforeach()
  endif()
endfunction()

# The command that runs a test program at n ranks, in the variable named by out.
function(koptim_mpi_command out n target)
  set(${out} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${KOPTIM_MPIEXEC_EXTRA_FLAGS} ${MPIEXEC_PREFLAGS}
             $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} PARENT_SCOPE)
endfunction()

# koptim_add_usage_error_tests(<name prefix> <program> "<args>@@<message>"...)
# One test per case: <program> run with <args> (separated by '|') exits with status 2 and prints
# <message> (a regular expression). The cases are read one argument each (ARGV<n>), not as a
# list, whose splitting would treat a '[' of a message as a bracket.
function(koptim_add_usage_error_tests prefix program)
  math(EXPR _last "${ARGC} - 1")
  foreach(_i RANGE 2 ${_last})
    string(REPLACE "@@" ";" _parts "${ARGV${_i}}")
    list(GET _parts 0 _args)
    list(GET _parts 1 _message)
    string(MAKE_C_IDENTIFIER "${_args}" _id)
    add_test(NAME ${prefix}${_id}
             COMMAND ${CMAKE_COMMAND} "-DCOMMAND=${program}|${_args}" -DRC=2 "-DEXPECT=${_message}"
                     -P ${PROJECT_SOURCE_DIR}/cmake/koptimCheckCommand.cmake)
  endforeach()
endfunction()
