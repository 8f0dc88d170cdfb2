rtx_add_tool(rtx-doctor SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-doctor/main.cpp)
