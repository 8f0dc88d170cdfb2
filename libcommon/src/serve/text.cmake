# serve: text (incremental detokenizing, stop strings, UTF-8) and the OpenAI request/response protocol.
