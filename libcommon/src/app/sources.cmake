# app: tool logic that lives in the library (tools stay thin), one folder per tool.
include(${CMAKE_CURRENT_LIST_DIR}/doctor/sources.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/bench/sources.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/tune/sources.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/serve/sources.cmake)
