# Fault injection: SIGKILL during store and checkpoint writes, disk full (RLIMIT_FSIZE),
# read-only RTX_HOME, missing data files, a store locked by another process.
rtx_add_test(reliability_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/reliability_test.cpp LABELS cpu TIMEOUT 300)
# The tool checks run the built rtx-bench, rtx-tune and rtx-train.
add_dependencies(reliability_test rtx-bench rtx-tune rtx-train)
