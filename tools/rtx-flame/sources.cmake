rtx_add_tool(rtx-flame SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-flame/main.cpp)
