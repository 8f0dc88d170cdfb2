# tests: gpt2.
