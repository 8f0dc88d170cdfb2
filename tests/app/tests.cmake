include(${CMAKE_CURRENT_LIST_DIR}/doctor.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/bench.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/serve.cmake)
