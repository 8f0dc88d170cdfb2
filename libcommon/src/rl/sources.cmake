# rl: reinforcement learning (issue 42): batched classic-control simulators, PPO on the IR.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/env.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ppo.cpp
)
# The simulators replay gymnasium's float64 arithmetic operation by operation: no FMA contraction
# (a fused a*b+c rounds once where numpy rounds twice), even under RTX_NATIVE=ON.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/env.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
