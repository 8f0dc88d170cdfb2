# models: gpt2 sources.
