# tests for telemetry
