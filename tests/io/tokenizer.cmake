# tests: tokenizers and datasets.
