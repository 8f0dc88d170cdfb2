# matmul tests (owned by the matmul engineer) and the matmul_bench benchmark (not a ctest test).
rtx_add_test(matmul_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/matmul_test.cpp LABELS cpu)

add_executable(matmul_bench ${CMAKE_CURRENT_LIST_DIR}/matmul_bench.cpp)
target_link_libraries(matmul_bench PRIVATE rtx::common)
target_include_directories(matmul_bench PRIVATE ${RTX_CBLAS_INCLUDE})
rtx_target_defaults(matmul_bench)
set_target_properties(matmul_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
# quant_matmul_bench: GMAC/s of matmuls on quantized weights (Q8_0, K-quants; not a ctest test).
add_executable(quant_matmul_bench ${CMAKE_CURRENT_LIST_DIR}/quant_matmul_bench.cpp)
target_link_libraries(quant_matmul_bench PRIVATE rtx::common)
rtx_target_defaults(quant_matmul_bench)
set_target_properties(quant_matmul_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
