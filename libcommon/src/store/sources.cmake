# store: the SQLite store ($RTX_HOME/rtx.db), migrations, RAII statements/transactions.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/sqlite_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/statement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/migrations.cpp
  ${CMAKE_CURRENT_LIST_DIR}/store.cpp
)
