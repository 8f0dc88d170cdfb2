# dist: communicators (MPI, NCCL, single process), gradient buckets with overlapped all-reduce.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/comm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mpi_comm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/buckets.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_ops.cpp
)

# MPI (OpenMPI from Debian) and, with CUDA, NCCL from the toolkit, linked to rtx_dist (which
# libcommon/CMakeLists.txt creates before including this file). Optional: without MPI the
# world communicator is a single process.
find_package(MPI COMPONENTS CXX QUIET)
if(MPI_CXX_FOUND)
  set_target_properties(MPI::MPI_CXX PROPERTIES IMPORTED_GLOBAL TRUE)
  message(STATUS "rtx: MPI ${MPI_CXX_VERSION} found: dist uses MPI (${MPIEXEC_EXECUTABLE})")
  target_link_libraries(rtx_dist PUBLIC MPI::MPI_CXX)
  target_compile_definitions(rtx_dist PUBLIC RTX_HAVE_MPI=1)
  if(MPIEXEC_EXECUTABLE)
    set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/comm.cpp PROPERTIES
                                COMPILE_DEFINITIONS "RTX_MPIEXEC=\"${MPIEXEC_EXECUTABLE}\"")
  endif()
else()
  message(STATUS "rtx: no MPI: dist runs single-process only")
endif()
if(RTX_HAVE_CUDA)
  find_path(RTX_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(RTX_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
  if(RTX_NCCL_INCLUDE AND RTX_NCCL_LIBRARY)
    message(STATUS "rtx: NCCL found: ${RTX_NCCL_LIBRARY}")
    list(APPEND RTX_COMMON_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda/nccl_comm.cu)
    target_include_directories(rtx_dist PUBLIC ${RTX_NCCL_INCLUDE})
    target_link_libraries(rtx_dist PUBLIC ${RTX_NCCL_LIBRARY})
    target_compile_definitions(rtx_dist PUBLIC RTX_HAVE_NCCL=1)
  else()
    message(STATUS "rtx: CUDA without NCCL (nccl.h / libnccl not found): no NCCL communicator")
  endif()
endif()
