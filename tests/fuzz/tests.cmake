# Corpus replay (GCC, normal build): each fuzz target's LLVMFuzzerTestOneInput run once over
# every file of tests/fuzz/corpus/<target>/ (ctest label `fuzz`). The fuzzer itself: `make fuzz`.
include(${CMAKE_CURRENT_LIST_DIR}/targets.cmake)
foreach(t ${RTX_FUZZ_TARGETS})
  add_executable(fuzz_replay_${t} ${CMAKE_CURRENT_LIST_DIR}/fuzz_${t}.cpp ${CMAKE_CURRENT_LIST_DIR}/replay_main.cpp)
  target_link_libraries(fuzz_replay_${t} PRIVATE rtx::common)
  target_compile_definitions(fuzz_replay_${t} PRIVATE RTX_FUZZ_DEFAULT_DATA="${RTX_FUZZ_DATA_DIR}")
  rtx_target_defaults(fuzz_replay_${t})
  set_target_properties(fuzz_replay_${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME fuzz_replay_${t} COMMAND fuzz_replay_${t} ${CMAKE_CURRENT_LIST_DIR}/corpus/${t})
  set_tests_properties(fuzz_replay_${t} PROPERTIES LABELS "fuzz" TIMEOUT 300
    ENVIRONMENT "RTX_DATA=${RTX_DATA_DIR};RTX_SOURCE_DIR=${PROJECT_SOURCE_DIR};ASAN_OPTIONS=intercept_tls_get_addr=0:detect_leaks=1")
endforeach()
