"""Traffic, traces and prompts: the workloads beyond the matrix, length distributions, datasets, request traces, exact-length prompts."""
