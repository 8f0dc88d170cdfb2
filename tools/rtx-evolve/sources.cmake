# rtx-evolve: main binds the subcommands; cmd_*.cpp bind each subcommand's flags.
rtx_add_tool(rtx-evolve SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/main.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_report.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_manage.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_history.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_kg.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/cmd_mcp.cpp)
