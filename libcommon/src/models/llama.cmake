# models: Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention) for serving, and its SentencePiece tokenizer.
