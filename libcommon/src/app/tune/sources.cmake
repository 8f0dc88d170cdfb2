# app/tune: rtx-tune command logic.
