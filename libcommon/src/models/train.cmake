# models: train sources.
