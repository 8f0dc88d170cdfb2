# serve: the load generator of rtx-serve bench (HTTP client, SSE, TTFT/TPOT/ITL statistics).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/loadgen.cpp
)
