# The layering test (ctest layering_test): cmake -DRTX_SOURCE_DIR=<repo> -P RtxCheckLayers.cmake
# 1. libcommon/modules.cmake is acyclic in its order: every dependency of a module is listed
#    before it.
# 2. Every #include "rtx/<m>/..." or "<m>/..." (src-internal headers) in libcommon/src/<x>/ and
#    libcommon/include/rtx/<x>/ names x itself or a module in RTX_DEPS_<x>; each violation is
#    printed as file:line and the test fails.
# 3. docs/architecture.md's "Module layers" table lists the same modules, order and dependencies.
# The CMake link graph equals the table by construction: libcommon/CMakeLists.txt creates one
# rtx_<m> per module linking exactly rtx_<d> for d in RTX_DEPS_<m> (and asserts it at configure
# time); whether the built archives' symbols respect it is ctest module_link_test
# (cmake/rtx_check_links.sh), which needs the build, so it is not in this script.
cmake_minimum_required(VERSION 3.20)
if(NOT RTX_SOURCE_DIR)
  message(FATAL_ERROR "pass -DRTX_SOURCE_DIR=<repository root>")
endif()
include(${RTX_SOURCE_DIR}/libcommon/modules.cmake)
set(errors 0)
set(seen "")
foreach(m IN LISTS RTX_MODULES)
  foreach(d IN LISTS RTX_DEPS_${m})
    if(NOT d IN_LIST seen)
      message(SEND_ERROR "modules.cmake: ${m} depends on ${d}, which is not listed before it (a cycle or an upward dependency)")
      math(EXPR errors "${errors} + 1")
    endif()
  endforeach()
  list(APPEND seen ${m})
endforeach()

foreach(m IN LISTS RTX_MODULES)
  file(GLOB_RECURSE files
       ${RTX_SOURCE_DIR}/libcommon/src/${m}/*.cpp ${RTX_SOURCE_DIR}/libcommon/src/${m}/*.hpp
       ${RTX_SOURCE_DIR}/libcommon/src/${m}/*.cu ${RTX_SOURCE_DIR}/libcommon/src/${m}/*.cuh
       ${RTX_SOURCE_DIR}/libcommon/src/${m}/*.in
       ${RTX_SOURCE_DIR}/libcommon/include/rtx/${m}/*.hpp ${RTX_SOURCE_DIR}/libcommon/include/rtx/${m}/*.h)
  foreach(f IN LISTS files)
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    file(STRINGS ${f} all_lines)
    foreach(line IN LISTS lines)
      if(line MATCHES "#[ \t]*include[ \t]*\"(rtx/)?([a-z_]+)/")
        set(target ${CMAKE_MATCH_2})
        if(target IN_LIST RTX_MODULES AND NOT target STREQUAL m AND NOT target IN_LIST RTX_DEPS_${m})
          list(FIND all_lines "${line}" idx)
          math(EXPR lineno "${idx} + 1")
          file(RELATIVE_PATH rel ${RTX_SOURCE_DIR} ${f})
          message(SEND_ERROR "${rel}:${lineno}: module '${m}' includes module '${target}', which is not among its dependencies (${RTX_DEPS_${m}}): ${line}")
          math(EXPR errors "${errors} + 1")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

# docs/architecture.md: rows "| `module` | dep, dep |" between the "Module layers" heading and
# the next heading, in layer order.
file(STRINGS ${RTX_SOURCE_DIR}/docs/architecture.md doc)
set(in_table FALSE)
set(doc_modules "")
foreach(line IN LISTS doc)
  if(line MATCHES "^## Module layers")
    set(in_table TRUE)
  elseif(in_table AND line MATCHES "^## ")
    break()
  elseif(in_table AND line MATCHES "^\\| `([a-z_]+)` \\| ([^|]*)\\|")
    set(dm ${CMAKE_MATCH_1})
    string(STRIP "${CMAKE_MATCH_2}" deps)
    string(REPLACE "`" "" deps "${deps}")
    string(REPLACE ", " ";" deps "${deps}")
    if(deps STREQUAL "-")
      set(deps "")
    endif()
    list(APPEND doc_modules ${dm})
    if(NOT "${deps}" STREQUAL "${RTX_DEPS_${dm}}")
      message(SEND_ERROR "docs/architecture.md: module ${dm} lists dependencies '${deps}', modules.cmake has '${RTX_DEPS_${dm}}'")
      math(EXPR errors "${errors} + 1")
    endif()
  endif()
endforeach()
if(NOT "${doc_modules}" STREQUAL "${RTX_MODULES}")
  message(SEND_ERROR "docs/architecture.md's Module layers table lists '${doc_modules}', modules.cmake has '${RTX_MODULES}' (same modules, same order)")
  math(EXPR errors "${errors} + 1")
endif()
if(errors GREATER 0)
  message(FATAL_ERROR "layering: ${errors} problem(s)")
endif()
message(STATUS "layering: ${RTX_MODULES} checked")
