rtx_add_test(core_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/error_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dtype_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/philox_test.cpp
  LABELS cpu)
