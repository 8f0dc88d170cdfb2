# rtx-evolve: main binds the subcommands; cmd_*.cpp bind each subcommand's flags.
rtx_add_tool(rtx-evolve SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/main.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_manage.cpp)
