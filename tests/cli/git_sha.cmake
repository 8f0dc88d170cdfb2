# cli_git_sha_test: the git sha in --version is that of HEAD (regenerated at every build).
add_test(NAME cli_git_sha_test COMMAND ${CMAKE_COMMAND}
  -DDOCTOR=$<TARGET_FILE:rtx-doctor> -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DGIT_EXECUTABLE=${GIT_EXECUTABLE}
  -P ${CMAKE_CURRENT_LIST_DIR}/git_sha_check.cmake)
set(git_sha_test_env "")
if(RTX_SANITIZE MATCHES "address")
  set(git_sha_test_env "ASAN_OPTIONS=intercept_tls_get_addr=0:detect_leaks=1"
      "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp")
endif()
set_tests_properties(cli_git_sha_test PROPERTIES LABELS "cpu;cli" TIMEOUT 60
  SKIP_REGULAR_EXPRESSION "rtx-skip:" ENVIRONMENT "${git_sha_test_env}")
