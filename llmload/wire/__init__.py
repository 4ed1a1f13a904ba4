"""Sans-I/O wire code: HTTP response head, chunked framing, SSE, the token timeline of a stream, the Prometheus text format. Imports nothing of llmload."""
