# tests for evolve: envelopes, proposers, sandbox, gates, promotion/rollback, statistical honesty.
rtx_add_test(evolve_gates_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gates_test.cpp LABELS cpu)
rtx_add_test(evolve_proposal_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/proposal_test.cpp LABELS cpu)
rtx_add_test(evolve_sandbox_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sandbox_test.cpp LABELS cpu)
rtx_add_test(evolve_trial_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/trial_test.cpp LABELS cpu)
rtx_add_test(evolve_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/evolve_cli_test.cpp LABELS cpu cli)
add_dependencies(evolve_cli_test rtx-evolve)
