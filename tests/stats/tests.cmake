# tests for stats
