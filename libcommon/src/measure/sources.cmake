# measure: the measuring engine below tune and evolve: bench packs and their expansion, the adaptive
# sampling runner, host-contention evidence and its one rule, the rtx.bench.v1 artifact, compare.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/pack.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/contention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/artifact.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compare.cpp
)
