# rtx-bench logic: packs, runner, artifacts, compare, subcommands.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/commands.cpp
)
