# tests for models: Llama forward and tokenizer on the stories260k GGUF.
