# tests for rl: the simulators against gymnasium (golden from make_classic_golden.py), PPO.
rtx_add_test(rl_classic_control_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/classic_control_test.cpp LABELS cpu)
rtx_add_test(rl_ppo_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ppo_test.cpp LABELS cpu)
