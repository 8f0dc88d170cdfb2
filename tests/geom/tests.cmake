# tests for geom: the Planetoid loader against PyG's facts (golden from make_cora_golden.py).
rtx_add_test(geom_planetoid_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/planetoid_test.cpp LABELS cpu)
rtx_add_test(geom_gcn_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gcn_test.cpp LABELS cpu)
