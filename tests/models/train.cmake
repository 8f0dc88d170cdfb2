# tests: the training loop, LR schedule, checkpoints and resume (real data: tiny-shakespeare).
rtx_add_test(models_train_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_test.cpp LABELS cpu)
# The CLI case runs the built rtx-train.
add_dependencies(models_train_test rtx-train)
