# tests: train.
