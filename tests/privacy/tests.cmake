# tests for privacy: accountants vs Opacus / dp-accounting goldens (make_dp_golden.py).
rtx_add_test(privacy_accountant_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/accountant_test.cpp LABELS cpu)
rtx_add_test(privacy_dpsgd_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/dpsgd_test.cpp LABELS cpu)
rtx_add_test(privacy_label_dp_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/label_dp_test.cpp LABELS cpu)
