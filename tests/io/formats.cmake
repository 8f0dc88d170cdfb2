# tests: safetensors and GGUF.
