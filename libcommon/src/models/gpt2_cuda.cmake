# models: gpt2_cuda sources.
