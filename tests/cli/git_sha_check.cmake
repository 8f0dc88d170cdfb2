# ctest cli_git_sha_test: `rtx-doctor --version` must name the commit the source tree is at
# (git rev-parse --short=12 HEAD): the sha is recomputed at every build, never left stale.
# Skipped (output "rtx-skip: ...") without git or when the source is not a git checkout.
# The -dirty suffix is only checked for form: files edited since the build change it legitimately.
execute_process(COMMAND "${DOCTOR}" --version RESULT_VARIABLE rc
  OUTPUT_VARIABLE out ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "rtx-doctor --version exited ${rc}: ${out} ${err}")
endif()
if(NOT out MATCHES "^rtx-doctor [0-9]+\\.[0-9]+\\.[0-9]+ \\(([^)]*)\\)$")
  message(FATAL_ERROR "rtx-doctor --version: unexpected output '${out}'")
endif()
set(reported "${CMAKE_MATCH_1}")

if(NOT GIT_EXECUTABLE OR NOT EXISTS "${GIT_EXECUTABLE}")
  message("rtx-skip: git not found at configure time; rtx-doctor reports '${reported}'")
  return()
endif()
execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --short=12 HEAD
  WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE rc
  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rc EQUAL 0 OR head STREQUAL "")
  if(NOT reported STREQUAL "unknown")
    message(FATAL_ERROR "${SOURCE_DIR} is not a git checkout, yet rtx-doctor reports '${reported}' (expected 'unknown')")
  endif()
  message("rtx-skip: ${SOURCE_DIR} is not a git checkout; rtx-doctor reports 'unknown' as expected")
  return()
endif()
if(NOT reported MATCHES "^${head}(-dirty)?$")
  message(FATAL_ERROR "rtx-doctor --version reports '${reported}' but HEAD is ${head}: the build's git sha is stale (rebuild, or the sha is not regenerated at build time)")
endif()
message("rtx-doctor reports '${reported}', HEAD is ${head}: ok")
