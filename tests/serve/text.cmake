# tests for serve: text handling and the OpenAI protocol.
