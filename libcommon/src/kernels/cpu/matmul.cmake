# CPU matmul sources (owned by the matmul engineer)
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/matmul_register.cpp
  ${CMAKE_CURRENT_LIST_DIR}/matmul_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/matmul_avx512.cpp
  ${CMAKE_CURRENT_LIST_DIR}/matmul_avx2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/matmul_q8.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../problems_matmul.cpp
)
