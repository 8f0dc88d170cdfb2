# rtx-bench logic
