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
# The link graph: libcommon/CMakeLists.txt links each rtx_<m> to exactly its modules.cmake row
# (by construction, asserted at configure time); this reads the built archives, so a call UP
# the table (which a static link may let through) fails too (cmake/rtx_check_links.sh).
add_test(NAME module_link_test
         COMMAND ${CMAKE_SOURCE_DIR}/cmake/rtx_check_links.sh ${CMAKE_NM} ${CMAKE_SOURCE_DIR}/libcommon/modules.cmake
                 ${CMAKE_BINARY_DIR}/libcommon)
set_tests_properties(module_link_test PROPERTIES LABELS cpu)
# Its own test: serve calls tune (sample_until); with tune taken out of serve's row it must fail.
add_test(NAME module_link_selftest
         COMMAND ${CMAKE_SOURCE_DIR}/cmake/rtx_check_links.sh ${CMAKE_NM} ${CMAKE_SOURCE_DIR}/libcommon/modules.cmake
                 ${CMAKE_BINARY_DIR}/libcommon)
set_tests_properties(module_link_selftest PROPERTIES LABELS cpu ENVIRONMENT "RTX_LINK_DROP=serve:tune"
  PASS_REGULAR_EXPRESSION "serve -> tune: _ZN3rtx4tune")
