# models: infer sources.
