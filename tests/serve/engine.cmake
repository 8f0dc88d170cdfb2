# tests for serve: KV cache, serving models, scheduler, HTTP server.
rtx_add_test(serve_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp LABELS cpu tsan)
rtx_add_test(serve_server_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_test.cpp LABELS cpu tsan)
rtx_add_test(serve_prefix_cache_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_cache_test.cpp LABELS cpu tsan)
# serve_bench: an executable (not a ctest test) printing decode tokens/s of a model for 1 and B
# sequences batched, without HTTP.
add_executable(serve_bench ${CMAKE_CURRENT_LIST_DIR}/serve_bench.cpp)
target_link_libraries(serve_bench PRIVATE rtx::common)
rtx_target_defaults(serve_bench)
set_target_properties(serve_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
# attention_bench: the decode step's paged attention alone (GPT-2 124M shapes, B sequences, KV
# blocks scattered through the pool), best time and K + V GB/s. Not a ctest test.
add_executable(attention_bench ${CMAKE_CURRENT_LIST_DIR}/attention_bench.cpp)
target_link_libraries(attention_bench PRIVATE rtx::common)
rtx_target_defaults(attention_bench)
set_target_properties(attention_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
# GPT-2 on CUDA (--device cuda): every case says SKIPPED without a GPU (ctest: skipped).
rtx_add_test(serve_engine_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_cuda_test.cpp LABELS cuda)
# --device selection and its errors, on every machine.
rtx_add_test(serve_device_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_test.cpp LABELS cpu)
# The guard's reach into cpp-httplib 0.11's protected members, over real loopback connections.
rtx_add_test(serve_http_guard_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_guard_test.cpp LABELS cpu tsan)
target_include_directories(serve_http_guard_test PRIVATE ${CMAKE_SOURCE_DIR}/libcommon/src)
target_compile_definitions(serve_http_guard_test PRIVATE RTX_HTTPLIB_VERSION="${RTX_HTTPLIB_VERSION}")
