# tests for cli
