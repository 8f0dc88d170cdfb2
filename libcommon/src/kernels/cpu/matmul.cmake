# CPU matmul sources (owned by the matmul engineer)
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/matmul_register.cpp
)
