# Run at every build (target koptim_git_hash): writes OUT, a source file that defines
# koptim::git_hash(), with the commit of SOURCE_DIR (`git rev-parse --short HEAD`, "-dirty" when
# tracked files differ from it; "unknown" outside a git checkout). The file is rewritten only when
# the text changes, so an unchanged commit recompiles nothing, and a new one recompiles one file:
# the hash a program prints is the commit its library was built from, never the one of the last
# configure.
set(hash "unknown")
if(GIT AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND ${GIT} rev-parse --short HEAD WORKING_DIRECTORY ${SOURCE_DIR} OUTPUT_VARIABLE head
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND NOT head STREQUAL "")
    set(hash "${head}")
    execute_process(COMMAND ${GIT} diff-index --quiet HEAD -- WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE dirty
                    OUTPUT_QUIET ERROR_QUIET)
    if(dirty EQUAL 1)
      string(APPEND hash "-dirty")
    endif()
  endif()
endif()
set(text "// Generated at build time by cmake/koptimGitHash.cmake. Do not edit.
#include <koptim/koptim_Version.hpp>

const char* koptim::git_hash() { return \"${hash}\"; }
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
