# tests for trace: trace files, stats, merge, flame graphs, the rtx-trace and rtx-flame CLIs.
