rtx_add_tool(rtx-serve SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-serve/main.cpp)
