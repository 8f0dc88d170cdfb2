rtx_add_tool(rtx-bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-bench/main.cpp)
