# tests for serve: KV cache, serving models, scheduler, HTTP server.
