# Helper functions for rtx targets: warnings, include dirs, test registration.

set(RTX_WARNINGS -Wall -Wextra -Wno-unused-parameter)

# rtx_target_defaults(<target>): warnings for C++ sources of a target.
function(rtx_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${RTX_WARNINGS}>)
  if(RTX_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()

# rtx_add_tool(<name> SOURCES ...): an executable rtx-<name> linked to libcommon.
function(rtx_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE rtx::common)
  rtx_target_defaults(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# rtx_add_test(<name> SOURCES ... [LABELS ...] [LOADS_HOST]): a Catch2 test executable registered
# with ctest. LOADS_HOST: the test loads every CPU on purpose (rtx::test::BusyHost), so ctest -j
# runs it alone (RUN_SERIAL): beside it, timing-driven tests (the scheduler's step-time fit) fail.
function(rtx_add_test name)
  cmake_parse_arguments(ARG "LOADS_HOST" "TIMEOUT" "SOURCES;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE rtx::common rtx_catch_main)
  rtx_target_defaults(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} --durations no)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set(env "RTX_DATA=${RTX_DATA_DIR};RTX_SOURCE_DIR=${CMAKE_SOURCE_DIR};RTX_BIN_DIR=${CMAKE_BINARY_DIR}/bin")
  if(RTX_SANITIZE MATCHES "address")
    # LeakSanitizer's scan of dynamic TLS crashes ("Tracer caught signal 11") on glibc 2.36
    # once NVIDIA libraries with TLS were dlopen'ed (hardware probing); leaks are still checked.
    list(APPEND env "ASAN_OPTIONS=intercept_tls_get_addr=0:detect_leaks=1"
         "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp")
  endif()
  if(RTX_SANITIZE MATCHES "thread")
    # libgomp is not built with TSan: its barriers look like races. One OpenMP thread per team
    # keeps the OpenMP regions on their calling thread, so TSan checks the code rtx synchronizes
    # itself (scheduler, HTTP server, runners); tests/tsan.supp lists the rest, each with a reason.
    list(APPEND env "OMP_NUM_THREADS=1"
         "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_SOURCE_DIR}/tests/tsan.supp")
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "${env}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if(ARG_LOADS_HOST)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
  if("cuda" IN_LIST ARG_LABELS)
    # Catch2 v2 has no SKIP(): CUDA tests print "SKIPPED: ..." without a GPU; ctest then
    # reports them as skipped (with the reason under --output-on-failure / -V), not as passed.
    set_tests_properties(${name} PROPERTIES
      SKIP_REGULAR_EXPRESSION "SKIPPED: no usable CUDA|SKIPPED: built without the CUDA backend")
  endif()
endfunction()
