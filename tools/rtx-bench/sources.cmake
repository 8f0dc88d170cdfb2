# rtx-bench: main binds the subcommands; each cmd_*.cpp binds one subcommand's flags.
rtx_add_tool(rtx-bench SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-bench/main.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-bench/cmd_run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-bench/cmd_compare.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-bench/cmd_list_show.cpp)
