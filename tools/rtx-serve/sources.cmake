# rtx-serve: main binds the subcommands; cmd_run.cpp the server, cmd_bench.cpp the load generator.
rtx_add_tool(rtx-serve SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-serve/main.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-serve/cmd_run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/rtx-serve/cmd_bench.cpp)
