# ctest helper: `koptim_demo --version` names the commit of the source tree (the build is run
# before the tests, so the library was built from it). Outside a git checkout there is nothing to
# compare; the demo must then say "unknown".
execute_process(COMMAND ${DEMO} --version OUTPUT_VARIABLE printed RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "koptim_demo --version failed (${rc})")
endif()
set(expected "unknown")
if(GIT AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND ${GIT} rev-parse --short HEAD WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE expected
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
string(FIND "${printed}" "(git ${expected}" where)
if(where EQUAL -1)
  message(FATAL_ERROR "koptim_demo --version printed '${printed}', not the source tree's commit ${expected}")
endif()
message(STATUS "${printed}")
