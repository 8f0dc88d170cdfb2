# rtx-doctor logic
