# tests for app
