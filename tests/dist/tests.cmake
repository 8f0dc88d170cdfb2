# tests for dist: data-parallel parity, bad launches, collectives.
# dist_test: one process (communicators, buckets, the GPT-2 gradient hook, the bench op).
rtx_add_test(dist_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/comm_test.cpp
  LABELS cpu)
# dist_mpi_test: collectives and data-parallel training; ctest runs it alone and, with MPI,
# as 2 ranks under mpiexec (dist_mpi_test_np2). Its hidden [.kill]/[.hang] cases are the
# workers of dist_launch_test.
rtx_add_test(dist_mpi_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/mpi_test.cpp
  LABELS cpu TIMEOUT 120)
rtx_add_test(dist_launch_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/launch_test.cpp
  LABELS cpu TIMEOUT 180)
# dist_nccl_test: the NCCL communicator on one GPU (skips without one).
rtx_add_test(dist_nccl_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/nccl_test.cpp
  LABELS cuda)
set(_rtx_mpiexec "${MPIEXEC_EXECUTABLE}")
if(NOT _rtx_mpiexec)
  set(_rtx_mpiexec mpiexec)
endif()
target_compile_definitions(dist_launch_test PRIVATE RTX_MPIEXEC="${_rtx_mpiexec}"
                           RTX_DIST_MPI_TEST="$<TARGET_FILE:dist_mpi_test>")
add_dependencies(dist_launch_test dist_mpi_test rtx-train)
if(TARGET MPI::MPI_CXX AND MPIEXEC_EXECUTABLE)
  add_test(NAME dist_mpi_test_np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe
                   $<TARGET_FILE:dist_mpi_test> --durations no)
  set_tests_properties(dist_mpi_test_np2 PROPERTIES TIMEOUT 120 LABELS "cpu;mpi"
    ENVIRONMENT "RTX_DATA=${RTX_DATA_DIR};RTX_SOURCE_DIR=${CMAKE_SOURCE_DIR};RTX_BIN_DIR=${CMAKE_BINARY_DIR}/bin;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
endif()
# Processes started by mpirun: Open MPI's libraries are built without frame pointers, so its
# process-lifetime allocations come with two-frame stacks that no LeakSanitizer suppression can
# match. Leak checking is off for these tests (ASan's other checks stay on).
if(RTX_SANITIZE MATCHES "address")
  foreach(t dist_launch_test dist_mpi_test_np2)
    if(TEST ${t})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=intercept_tls_get_addr=0:detect_leaks=0")
    endif()
  endforeach()
endif()
set_property(TEST dist_mpi_test APPEND PROPERTY ENVIRONMENT OMP_NUM_THREADS=1)
