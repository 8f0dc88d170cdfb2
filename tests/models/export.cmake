# tests: export.
