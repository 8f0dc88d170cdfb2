# models: GGUF export of GPT-2.
