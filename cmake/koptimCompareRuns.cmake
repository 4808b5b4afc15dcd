# ctest helper: runs FIRST and SECOND (arguments separated by '|'), both must succeed and print
# the same "parameters hash" line (bitwise equal final parameters).
foreach(_which FIRST SECOND)
  string(REPLACE "|" ";" _command "${${_which}}")
  execute_process(COMMAND ${_command} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0 OR NOT _out MATCHES "parameters hash ([0-9a-f]+)")
    message(FATAL_ERROR "${_command} failed (${_rc}):\n${_out}${_err}")
  endif()
  set(_hash_${_which} "${CMAKE_MATCH_1}")
  message("${_command}:\n${_out}")
endforeach()
if(NOT _hash_FIRST STREQUAL _hash_SECOND)
  message(FATAL_ERROR "the runs differ: parameters hash ${_hash_FIRST} against ${_hash_SECOND}")
endif()
