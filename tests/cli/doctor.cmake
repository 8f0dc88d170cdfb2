# rtx-doctor CLI tests
