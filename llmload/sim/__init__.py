"""The simulated vLLM server (`llmload sim`).

A stand-in for a real vLLM server that behaves like one wherever a benchmark can see it:
the same HTTP API, continuous batching, a finite KV cache, a prefix cache and a queue, with
step times taken from a calibrated *profile*. With no `--host`, llmload runs against it,
and every test in the project runs against it instead of a mock.

Modules, from pure to I/O:
- `profiles`  — the `Profile` value object and its JSON files (data, not code).
- `tokenizer` — a deterministic word-level tokenizer, so token counts are exact.
- `engine`    — the engine model: scheduler, KV block pool, prefix cache, step times.
                Pure and clock-free; a driver says when steps happen.
- `virtual`   — drives the engine in virtual time (calibration, unit tests).
- `calibration` — the seed page's figures and its procedure, replayed in virtual time.
- `protocol`  — request validation and vLLM-shaped response bodies and SSE chunks.
- `pooling`   — the embeddings and rerank endpoints: validation and answers (each input a
                prefill in the engine).
- `server`    — the gevent HTTP server that drives the engine in real time.
- `launcher`  — `SimProcess`, runs the server as a child process (tests, `llmload run`).

Nothing here does work at import time, and importing this package imports no gevent.
"""
