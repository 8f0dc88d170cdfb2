# tests for tune.
