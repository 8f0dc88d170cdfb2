# rtx-train: main binds the subcommands; each cmd_*.cpp binds one subcommand's flags.
rtx_add_tool(rtx-train SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/main.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/cmd_prepare.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/cmd_run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/cmd_run_gcn.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/cmd_run_dp.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/cmd_sample.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/cmd_rl.cpp)
