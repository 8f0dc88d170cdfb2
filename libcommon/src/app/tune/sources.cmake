# app/tune: rtx-tune command logic.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/commands.cpp
)
