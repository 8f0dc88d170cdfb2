# tests: infer.
