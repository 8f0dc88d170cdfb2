# tests for serve: the load generator.
