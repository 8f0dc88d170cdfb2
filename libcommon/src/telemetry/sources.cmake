# telemetry
list(APPEND RTX_COMMON_SOURCES)
