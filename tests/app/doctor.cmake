# doctor app tests: the doctor run in-process (quick and with shrunken probes), report fields, peaks.
rtx_add_test(app_doctor_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/doctor_test.cpp LABELS cpu)
