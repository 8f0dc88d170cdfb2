# io: tokenizers (char, GPT-2 BPE) and token datasets.
