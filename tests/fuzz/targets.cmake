# The fuzz targets (tests/fuzz/fuzz_<name>.cpp, corpus in tests/fuzz/corpus/<name>/), shared by
# the GCC corpus replay (tests.cmake) and the libFuzzer build (CMakeLists.txt).
set(RTX_FUZZ_TARGETS
  safetensors gguf checkpoint benchpack profile openai text_stream gpt2_tokenizer llama_tokenizer
  mcp proposal trace folded pickle)
if(NOT RTX_FUZZ_DATA_DIR)
  if(RTX_DATA_DIR)
    set(RTX_FUZZ_DATA_DIR ${RTX_DATA_DIR})
  elseif(DEFINED ENV{RTX_DATA})
    set(RTX_FUZZ_DATA_DIR $ENV{RTX_DATA})
  else()
    get_filename_component(RTX_FUZZ_DATA_DIR ${PROJECT_SOURCE_DIR}/../shared/data ABSOLUTE)
  endif()
endif()
