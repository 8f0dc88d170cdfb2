# tests for io
