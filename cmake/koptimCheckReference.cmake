# ctest helper: runs `koptim_demo --print-parameters` and fails when docs/parameters.md differs,
# so the parameter-list reference in the docs stays true to the code.
execute_process(COMMAND ${DEMO} --print-parameters OUTPUT_VARIABLE printed RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "koptim_demo --print-parameters failed (${rc})")
endif()
file(READ ${DOC} doc)
string(FIND "${doc}" "${printed}" where)
if(where EQUAL -1)
  file(WRITE ${OUT} "${printed}")
  message(FATAL_ERROR "docs/parameters.md is out of date: the tables printed by koptim_demo --print-parameters "
                      "(written to ${OUT}) are not in it")
endif()
