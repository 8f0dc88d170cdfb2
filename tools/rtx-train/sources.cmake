rtx_add_tool(rtx-train SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-train/main.cpp)
