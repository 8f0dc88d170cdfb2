# CLI tests: each tool run with --json, schema and exit codes checked, fed bad input.
include(${CMAKE_CURRENT_LIST_DIR}/doctor.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/git_sha.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/bench.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/train.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/robustness.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/serve_bench.cmake)
