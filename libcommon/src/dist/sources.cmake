# dist: communicators (MPI, NCCL, single process), gradient buckets with overlapped all-reduce.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/comm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mpi_comm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/buckets.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_ops.cpp
)

# MPI (OpenMPI from Debian) and, with CUDA, NCCL from the toolkit. Optional: without MPI the
# world communicator is a single process. The links are deferred to the end of this directory
# (rtx_common is defined after the module lists); the lead may move this block into
# libcommon/CMakeLists.txt as plain target_link_libraries / target_compile_definitions.
find_package(MPI COMPONENTS CXX QUIET)
if(MPI_CXX_FOUND)
  set_target_properties(MPI::MPI_CXX PROPERTIES IMPORTED_GLOBAL TRUE)
  message(STATUS "rtx: MPI ${MPI_CXX_VERSION} found: dist uses MPI (${MPIEXEC_EXECUTABLE})")
  cmake_language(DEFER CALL target_link_libraries rtx_common PUBLIC MPI::MPI_CXX)
  cmake_language(DEFER CALL target_compile_definitions rtx_common PUBLIC RTX_HAVE_MPI=1)
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
    cmake_language(DEFER CALL target_include_directories rtx_common_cuda PUBLIC ${RTX_NCCL_INCLUDE})
    cmake_language(DEFER CALL target_link_libraries rtx_common_cuda PUBLIC ${RTX_NCCL_LIBRARY})
    cmake_language(DEFER CALL target_compile_definitions rtx_common PUBLIC RTX_HAVE_NCCL=1)
  else()
    message(STATUS "rtx: CUDA without NCCL (nccl.h / libnccl not found): no NCCL communicator")
  endif()
endif()
