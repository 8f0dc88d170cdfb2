# tests for store: migrations, open errors, transactions, busy timeout, typed helpers.
rtx_add_test(store_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/store_test.cpp
  LABELS cpu)
