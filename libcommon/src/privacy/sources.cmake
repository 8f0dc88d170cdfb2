# privacy: differential privacy (issue 44): the RDP and PLD accountants of the subsampled Gaussian.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/rdp.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pld.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dpsgd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/label_dp.cpp
)
