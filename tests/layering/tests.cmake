# The layering test: every #include of libcommon against libcommon/modules.cmake's table, the
# table's order (no cycles) and docs/architecture.md's copy of it (cmake/RtxCheckLayers.cmake).
add_test(NAME layering_test
         COMMAND ${CMAKE_COMMAND} -DRTX_SOURCE_DIR=${CMAKE_SOURCE_DIR} -P ${CMAKE_SOURCE_DIR}/cmake/RtxCheckLayers.cmake)
set_tests_properties(layering_test PROPERTIES LABELS cpu)
# Its own test: a fixture tree with one planted upward include must fail, naming file and line.
add_test(NAME layering_selftest
         COMMAND ${CMAKE_COMMAND} -DRTX_SOURCE_DIR=${CMAKE_CURRENT_LIST_DIR}/bad_tree -P ${CMAKE_SOURCE_DIR}/cmake/RtxCheckLayers.cmake)
set_tests_properties(layering_selftest PROPERTIES LABELS cpu
  PASS_REGULAR_EXPRESSION "libcommon/src/low/low.cpp:3: module 'low' includes module 'high'")
