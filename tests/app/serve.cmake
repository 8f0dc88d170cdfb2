# app/serve tests: rtx-serve run's start-up policy in-process (flag checks, profiles and promoted
# configs under given flags, the canary's profile, bind errors, one run to a stopped server).
rtx_add_test(app_serve_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_test.cpp LABELS cpu)
