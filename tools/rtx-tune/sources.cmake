# rtx-tune: main binds the subcommands; each cmd_*.cpp binds one subcommand's flags.
rtx_add_tool(rtx-tune SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-tune/main.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-tune/cmd_run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-tune/cmd_profiles.cpp)
