# ctest helper: what configure must refuse, and what a consumer of the installed package must be
# able to do. Run with -DSOURCE_DIR=... -DWORK=... -DGENERATOR=... -DPREFIX=<koptim's install
# prefix> -DCXX=<koptim's C++ compiler>.
#
# 1. koptim's configure refuses, naming the value: an ENABLE switch that is not a CMake boolean
#    (if() would read any other word as ON), host flags the compiler does not take (the build
#    would stop at its first file), a Kokkos older than koptim_MIN_KOKKOS_VERSION.
# 2. A consumer whose two sibling directories each call find_package(koptim) configures and
#    generates (imported targets are per directory).
# 3. A consumer's find_package(koptim) without REQUIRED, where a dependency (Kokkos) is not found,
#    leaves koptim_FOUND false with the dependency's reason, instead of failing.
function(koptim_expect_refused name message)
  set(dir ${WORK}/${name})
  file(REMOVE_RECURSE "${dir}")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${dir} -G "${GENERATOR}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " text "${out} ${err}")  # CMake wraps its messages
  string(FIND "${text}" "${message}" where)
  if(rc EQUAL 0 OR where EQUAL -1)
    message(FATAL_ERROR "configuring with ${ARGN}: expected a refusal with '${message}', got rc ${rc}:\n${out}\n${err}")
  endif()
  message(STATUS "refused as expected: ${ARGN}")
endfunction()

koptim_expect_refused(tests_maybe "koptim_ENABLE_TESTS=maybe is not allowed" -Dkoptim_ENABLE_TESTS=maybe)
koptim_expect_refused(examples_nope "koptim_ENABLE_EXAMPLES=nope is not allowed" -Dkoptim_ENABLE_EXAMPLES=nope)
koptim_expect_refused(hdf5_maybe "koptim_ENABLE_HDF5=maybe is not allowed" -Dkoptim_ENABLE_HDF5=maybe)
koptim_expect_refused(host_arch_typo "koptim_HOST_ARCH=-march=nativ: the compiler" -Dkoptim_HOST_ARCH=-march=nativ
                      -Dkoptim_ENABLE_TESTS=OFF -Dkoptim_ENABLE_EXAMPLES=OFF)
koptim_expect_refused(kokkos_too_old "older than koptim_MIN_KOKKOS_VERSION = 999" -Dkoptim_MIN_KOKKOS_VERSION=999
                      -Dkoptim_ENABLE_TESTS=OFF -Dkoptim_ENABLE_EXAMPLES=OFF)

function(koptim_consumer name)
  set(dir ${WORK}/${name})
  file(REMOVE_RECURSE "${dir}")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK}/${name}_src -B ${dir} -G "${GENERATOR}"
                          -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_CXX_COMPILER=${CXX} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the consumer ${name} did not configure:\n${out}\n${err}")
  endif()
  set(consumer_output "${out}" PARENT_SCOPE)
endfunction()

# 2. Two sibling directories.
set(src ${WORK}/siblings_src)
file(REMOVE_RECURSE "${src}")
file(WRITE ${src}/CMakeLists.txt
     "cmake_minimum_required(VERSION 3.16)\nproject(siblings LANGUAGES CXX)\nadd_subdirectory(a)\nadd_subdirectory(b)\n")
file(WRITE ${src}/main.cpp "#include <koptim/koptim.hpp>\nint main() { return 0; }\n")
foreach(d a b)
  file(WRITE ${src}/${d}/CMakeLists.txt "find_package(koptim CONFIG REQUIRED)\nadd_executable(use_${d} ../main.cpp)\n"
                                         "target_link_libraries(use_${d} PRIVATE koptim::koptim)\n")
endforeach()
koptim_consumer(siblings)
message(STATUS "two sibling directories each found koptim")

# 3. Optional, with Kokkos not found.
set(src ${WORK}/optional_src)
file(REMOVE_RECURSE "${src}")
file(WRITE ${src}/CMakeLists.txt
     "cmake_minimum_required(VERSION 3.16)\nproject(optional LANGUAGES CXX)\nfind_package(koptim CONFIG)\n"
     "if(koptim_FOUND OR TARGET koptim::koptim)\n  message(FATAL_ERROR \"koptim found without Kokkos\")\nendif()\n"
     "message(STATUS \"koptim not found: \${koptim_NOT_FOUND_MESSAGE}\")\n")
koptim_consumer(optional -DCMAKE_DISABLE_FIND_PACKAGE_Kokkos=TRUE)
string(FIND "${consumer_output}" "koptim not found: koptim could not be found because dependency Kokkos" where)
if(where EQUAL -1)
  message(FATAL_ERROR "the optional consumer did not get the dependency's reason:\n${consumer_output}")
endif()
message(STATUS "an optional find_package(koptim) without Kokkos: not found, with the reason")
file(REMOVE_RECURSE "${WORK}")
