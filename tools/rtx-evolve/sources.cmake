rtx_add_tool(rtx-evolve SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-evolve/main.cpp)
