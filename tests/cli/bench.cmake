# rtx-bench CLI tests
