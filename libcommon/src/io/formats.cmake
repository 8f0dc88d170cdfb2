# io: safetensors and GGUF readers/writers.
