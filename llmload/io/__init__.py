"""I/O: the streaming HTTP client, the server probe, NVML and the host, process limits."""
