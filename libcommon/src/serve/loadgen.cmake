# serve: the load generator of rtx-serve bench (HTTP client, SSE, TTFT/TPOT/ITL statistics).
