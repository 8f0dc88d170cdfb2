# cmake -P cmake/RtxGitSha.cmake -DRTX_SOURCE_DIR=<src> -DRTX_GIT_SHA_FILE=<out> [-DGIT_EXECUTABLE=<git>]
# Run at every build by the rtx_git_sha target (libcommon/CMakeLists.txt): writes
#   #define RTX_BUILD_GIT_SHA "<short=12 sha of HEAD>[-dirty]"
# to RTX_GIT_SHA_FILE, touching it only when the value changed, so an unchanged tree recompiles
# nothing and a new commit recompiles build_info.cpp alone. "-dirty": tracked files differ from
# HEAD (untracked files don't count). "unknown" without git or outside a git checkout (tarball).
if(NOT RTX_SOURCE_DIR OR NOT RTX_GIT_SHA_FILE)
  message(FATAL_ERROR "RtxGitSha.cmake: pass -DRTX_SOURCE_DIR=... -DRTX_GIT_SHA_FILE=...")
endif()

set(sha "")
if(GIT_EXECUTABLE AND EXISTS "${GIT_EXECUTABLE}")
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --short=12 HEAD
    WORKING_DIRECTORY "${RTX_SOURCE_DIR}" RESULT_VARIABLE rc
    OUTPUT_VARIABLE sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT rc EQUAL 0)
    set(sha "")
  endif()
endif()
if(sha STREQUAL "")
  set(sha "unknown")
else()
  # --no-optional-locks: no opportunistic index refresh, so a build never holds .git/index.lock
  # while someone commits in the same checkout.
  execute_process(COMMAND "${GIT_EXECUTABLE}" --no-optional-locks status --porcelain --untracked-files=no
    WORKING_DIRECTORY "${RTX_SOURCE_DIR}" RESULT_VARIABLE rc
    OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND NOT dirty STREQUAL "")
    string(APPEND sha "-dirty")
  endif()
endif()

set(content "// Generated at build time by cmake/RtxGitSha.cmake; rewritten only when the sha changes.\n#define RTX_BUILD_GIT_SHA \"${sha}\"\n")
set(old "")
if(EXISTS "${RTX_GIT_SHA_FILE}")
  file(READ "${RTX_GIT_SHA_FILE}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${RTX_GIT_SHA_FILE}.tmp" "${content}")
  file(RENAME "${RTX_GIT_SHA_FILE}.tmp" "${RTX_GIT_SHA_FILE}")
  message(STATUS "rtx: git sha ${sha}")
endif()
