# rtx-bench logic: packs, runner, artifacts, compare, subcommands.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/pack.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/artifact.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compare.cpp
  ${CMAKE_CURRENT_LIST_DIR}/contention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/commands.cpp
)
