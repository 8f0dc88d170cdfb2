rtx_add_tool(rtx-trace SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-trace/main.cpp)
