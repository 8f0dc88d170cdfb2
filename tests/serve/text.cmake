# tests for serve: text handling and the OpenAI protocol.
rtx_add_test(serve_text_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/text_test.cpp LABELS cpu)
rtx_add_test(serve_openai_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/openai_test.cpp LABELS cpu)
