"""The ad-hoc request factory: what a user sends outside the matrix (plain `locust -f`).

`AdhocRequests` (at `environment.llmload.adhoc`) probes the server once per process and
builds the request from the `--llm-*` options (`llmload.loadgen.plugin.add_arguments`); it
is built again at each test start, since the web UI's form can change the options.
"""

from __future__ import annotations

import logging

import gevent.lock

from llmload.core.capacity.engines import engine_caps
from llmload.core.capacity.protocols import ENDPOINT_PATHS, request_body
from llmload.core.traffic.prompts import PromptBuilder
from llmload.core.traffic.workloads import parse_think_time
from llmload.loadgen.sessions import CHAT_PATH, SessionPlan

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

        workload = str(getattr(opts, "llm_workload", "requests"))
        session = None
        if workload == "sessions":
            session = self._session_plan(info, caps, api_key, max_tokens, fixed, temperature)
        else:
            logger.info("llmload: %s at %s (engine %s), %d-token prompts, %d output tokens",
                        info.model, info.base_url, caps.name, n_prompt, max_tokens)
        return {"base_url": info.base_url, "path": ENDPOINT_PATHS[endpoint], "body": body,
                "count_key": caps.count_key, "workload": workload, "session": session,
                "options": {"cold": str(getattr(opts, "llm_cold", "false")).lower() == "true",
                            "timeout_s": float(getattr(opts, "llm_timeout", 600.0))}}

    def _session_plan(self, info, caps, api_key: str | None, max_tokens: int, fixed: bool,
                      temperature: float) -> SessionPlan:
        """The conversation every user has (`--llm-workload sessions`), on the chat endpoint;
        bad options are one-line ValueErrors."""
        from llmload.io.probe import build_prompts
        opts = self.environment.parsed_options
        system_tokens = int(getattr(opts, "llm_system_prompt_tokens", 1024))
        turns = int(getattr(opts, "llm_turns", 4))
        turn_tokens = int(getattr(opts, "llm_turn_tokens", 128))
        if turns < 1 or turn_tokens < 1 or system_tokens < 1 or max_tokens < 1:
            raise ValueError(f"sessions need turns ≥ 1 (got {turns}) and system prompt, turn and output "
                             f"tokens ≥ 1 (got {system_tokens}, {turn_tokens}, {max_tokens})")
        think = parse_think_time(getattr(opts, "llm_think_time", "0"))
        # Message contents: text sized by the server's tokens per word, no template around it.
        texts = PromptBuilder(tokens_per_word=build_prompts(info, endpoint="chat", api_key=api_key).tokens_per_word)

        def body(messages: list[dict[str, str]], n: int) -> bytes:
            return request_body(caps, endpoint="chat", model=info.model, messages=messages, max_tokens=n,
                                fixed_output=fixed, temperature=temperature)

        logger.info("llmload: %s at %s (engine %s), chat sessions: %d-token system prompt, %d turns of %d "
                    "tokens, %d output tokens, think time %s", info.model, info.base_url, caps.name,
                    system_tokens, turns, turn_tokens, max_tokens, think)
        # One system prompt for every user of every process (a key of its own, not the run's).
        return SessionPlan(path=CHAT_PATH, system=texts.text(f"llmload-sessions/system/{system_tokens}", system_tokens),
                           turns=turns, turn_tokens=turn_tokens, max_tokens=max_tokens, think=think,
                           count_key=caps.count_key, text=texts.text, body=body)
