# tests: gpt2_cuda.
