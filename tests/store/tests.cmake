# tests for store
