# models: GPT-2 config/layout/front end (gpt2.cpp) and the CPU backend (gpt2_cpu.cpp).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/gpt2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt2_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt2_graph.cpp
)
