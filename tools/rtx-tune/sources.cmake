rtx_add_tool(rtx-tune SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-tune/main.cpp)
