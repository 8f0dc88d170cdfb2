# evolve: proposals, proposers, sandboxed validation, gates, signed promotion and rollback (rtx-evolve).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/proposal.cpp
  ${CMAKE_CURRENT_LIST_DIR}/proposal_store.cpp
  ${CMAKE_CURRENT_LIST_DIR}/history.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deploy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/canary.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gates.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sandbox.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trial.cpp
  ${CMAKE_CURRENT_LIST_DIR}/proposers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kg.cpp
  ${CMAKE_CURRENT_LIST_DIR}/validate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run.cpp
  ${CMAKE_CURRENT_LIST_DIR}/status.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mcp.cpp)
