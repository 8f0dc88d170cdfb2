# app/serve: rtx-serve run's start-up policy (flag checks, tuned profiles and promoted configs
# over flags, model and canary loading, server configuration, bind errors).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/run.cpp
)
