"""The ad-hoc request factory: what a user sends outside the matrix (plain `locust -f`).

`AdhocRequests` (at `environment.llmload.adhoc`) probes the server once per process and
builds the request from the `--llm-*` options (`llmload.loadgen.plugin.add_arguments`); it
is built again at each test start, since the web UI's form can change the options.
"""

from __future__ import annotations

import logging

import gevent.lock

from llmload.core.engines import ENDPOINT_PATHS, engine_caps, request_body

logger = logging.getLogger(__name__)


class AdhocRequests:
    """The request factory of ad hoc mode, one per process."""

    def __init__(self, environment) -> None:
        self.environment = environment
        self._adhoc: dict | None = None
        self._adhoc_lock = gevent.lock.Semaphore()

    def setup(self, host: str | None, api_key: str | None) -> dict:
        """Probe the server once per process and build the request factory."""
        with self._adhoc_lock:
            if self._adhoc is None:
                self._adhoc = self._make_adhoc(host, api_key)
        return self._adhoc

    def reset(self) -> None:
        self._adhoc = None

    def _make_adhoc(self, host: str | None, api_key: str | None) -> dict:
        from llmload.io.probe import build_prompts, probe_server
        opts = self.environment.parsed_options
        if not host:
            raise RuntimeError("no host: pass --host URL (e.g. the one `llmload sim` prints)")
        model = getattr(opts, "llm_model", "") or None
        info = probe_server(host, api_key=api_key, model=model)
        engine = getattr(opts, "llm_engine", "auto")
        caps = info.caps if engine in ("", "auto") else engine_caps(engine)
        endpoint = getattr(opts, "llm_endpoint", "completions")
        n_prompt = int(getattr(opts, "llm_prompt_tokens", 512))
        prompts = build_prompts(info, endpoint=endpoint, api_key=api_key, prompt_tokens=(n_prompt,))
        max_tokens = int(getattr(opts, "llm_max_tokens", 256))
        fixed = str(getattr(opts, "llm_ignore_eos", "true")).lower() == "true"
        temperature = float(getattr(opts, "llm_temperature", 0.0))

        def body(key: str) -> bytes:
            return request_body(caps, endpoint=endpoint, model=info.model, prompt=prompts.prompt(key, n_prompt),
                                max_tokens=max_tokens, fixed_output=fixed, temperature=temperature)

        logger.info("llmload: %s at %s (engine %s), %d-token prompts, %d output tokens",
                    info.model, info.base_url, caps.name, n_prompt, max_tokens)
        return {"base_url": info.base_url, "path": ENDPOINT_PATHS[endpoint], "body": body,
                "count_key": caps.count_key,
                "options": {"cold": str(getattr(opts, "llm_cold", "false")).lower() == "true",
                            "timeout_s": float(getattr(opts, "llm_timeout", 600.0))}}
