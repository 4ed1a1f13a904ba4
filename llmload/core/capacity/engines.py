"""What each server engine accepts and tells, as data (../shared/reference/servers.md).

Request bodies, token counting, capacity limits and server-side truth are all read from
this table, never from if-chains spread through the code: a field is sent only where the
engine accepts it (TensorRT-LLM rejects unknown fields), a limit is read only where the
engine reports it, and a row says where each figure comes from so the report can say too.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Probe documents by name -> the GET path that returns them (`probe.fetch_docs`).
#: "models" is the served model's entry of /v1/models; "launch" is the user's
#: --launch-command, read for flags the engine does not report over HTTP.
DOC_PATHS: dict[str, str] = {
    "models": "/v1/models",
    "props": "/props",
    "slots": "/slots",
    "server_info": "/server_info",
    "info": "/info",
    "metrics": "/metrics",
}


@dataclass(frozen=True, slots=True)
class Source:
    """Where one capacity figure is read: a probe document and a place in it.

    - JSON documents: `path` is a dotted path ("default_generation_settings.n_ctx"); a list
      in the way is indexed by its first element.
    - "metrics": `path` is a metric name; with `label`, the value of that label (e.g.
      vllm:cache_config_info's labels), multiplied by the label `times` when given.
    - "launch": `path` is a "|"-separated list of flags ("--max-num-seqs|-n"); the value
      is the word after the flag (or after "=").
    """

    doc: str
    path: str
    label: str | None = None
    times: str | None = None

    def describe(self) -> str:
        if self.doc == "metrics":
            where = f"{self.path} {self.label}" if self.label else self.path
            return f"/metrics {where}" + (f" × {self.times}" if self.times else "")
        if self.doc == "launch":
            return f"launch command {self.path.split('|')[0]}"
        return f"{DOC_PATHS.get(self.doc, self.doc)} {self.path}"


STARTUP_FACTOR = 10.0
MIN_STARTUP_S = 300.0
"""A server without an engine row (or a quick one) gets 5 minutes to answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """How an engine is started from its command line (`llmload tune`): the words that name
    it, its port flag, the flags whose values the twin models, and how long a start takes.

    `tuned`: (flag, twin profile field) pairs; a flag "--set KEY" is the simulator's
    `--set KEY=VALUE`. A flag not listed is measured at every value (the twin has no model
    of it)."""

    programs: tuple[tuple[str, ...], ...]
    """Each: consecutive words of a command line that name the engine (("vllm", "serve"))."""
    port_flag: str = "--port"
    tuned: tuple[tuple[str, str], ...] = ()
    start_s: float = 60.0
    """A typical start with a small model; `llmload tune` waits `STARTUP_FACTOR` times as long
    (at least `MIN_STARTUP_S`) for its readiness (`GET /v1/models` answering 200) unless
    --startup-timeout says otherwise."""

    def startup_timeout_s(self) -> float:
        return max(MIN_STARTUP_S, STARTUP_FACTOR * self.start_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCaps:
    name: str
    token_id_prompts: bool
    """/v1/completions accepts `prompt` as a list of token IDs."""
    ignore_eos: bool
    min_tokens: bool
    include_usage: bool
    """Accepts stream_options.include_usage (a final usage chunk)."""
    continuous_usage: bool
    """Accepts stream_options.continuous_usage_stats (usage on every chunk)."""
    cache_salt: bool
    tokenize_path: str | None
    """A tokenizer endpoint, if any (its request shape is in `tokenize_key`)."""
    tokenize_key: str = "prompt"
    """Field name of the text in the tokenizer request body."""
    tokenize_messages: bool = False
    """The tokenizer endpoint takes `messages` and applies the chat template (vLLM)."""
    count_fields: tuple[tuple[str, object], ...] = ()
    """Extra tokenizer request fields that make it count a text as a request's prompt is
    counted (llama.cpp: BOS added, special tokens parsed)."""
    answer_count_fields: tuple[tuple[str, object], ...] = (("add_special_tokens", False),)
    """Tokenizer request fields that make it count a text as generated tokens are counted
    (no BOS or other special token added): a dataset answer's length."""
    apply_template_path: str | None = None
    """An endpoint that renders chat messages through the template ({messages} -> {prompt}),
    whose text the tokenizer then counts exactly (llama.cpp's /apply-template)."""
    stream_fields: tuple[tuple[str, object], ...] = ()
    """Extra request fields that make the server report cumulative counts on every chunk
    (llama.cpp: timings_per_token)."""
    count_key: str = "completion_tokens"
    """The cumulative per-chunk token count the stream carries once asked for."""
    cold_fields: tuple[tuple[str, object], ...] = ()
    """Extra fields of a cold-prefill request that make sure no cache serves it."""
    server_timings: bool = False
    """Every chunk (or the final one) carries the server's own timings (llama.cpp's
    `timings`: predicted_n/predicted_ms, prompt_n/prompt_ms, cache_n)."""
    generated_counter: tuple[str, ...] = ()
    """Prometheus counters of generated tokens that move every decode step."""
    ended_counter: tuple[str, ...] = ()
    """Counters of generated tokens that count a request's when it ends, a closed one's too
    (llama.cpp, at a slot's release): read only with no request running; () : as above."""
    prefix_cache_counters: tuple[str, str] | None = None
    """Prometheus counters of the prefix cache, in tokens: (hits, queries); their deltas over a
    window give the share of prompt tokens the cache served (None: the engine has none)."""
    docs: tuple[str, ...] = ("metrics",)
    """Probe documents to fetch for this engine (keys of DOC_PATHS)."""
    sequence_limit: tuple[Source, ...] = ()
    """Where the per-sequence token limit is reported, most trusted first."""
    pool_limit: tuple[Source, ...] = ()
    """Where the shared KV pool (tokens) is reported."""
    block_size: tuple[Source, ...] = ()
    """Where the KV block size is reported."""
    count_limit: tuple[Source, ...] = ()
    """Where the limit on sequences served at once is reported."""
    pool_note: str = ""
    """What to say when no pool is reported (how this engine shares, or not, its KV)."""
    null_blocks: int = 0
    """KV blocks of the reported pool that no sequence can use (vLLM V1 keeps one block as
    its null block: a pool of 40 blocks holds 39 blocks of sequences)."""
    launch: Launch | None = None
    """How its server is started (`llmload tune`); None: started only by the user."""
    endpoint_drops: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(endpoint, the capabilities above it does not have there): the fields that endpoint
    ignores on this engine (`protocols.caps_on`)."""
    pooling_batch: str | None = None
    """A pattern of the engine's refusal of an input longer than it pools in one batch, its
    group the limit (llama.cpp pools within one physical batch, -ub, which its API does not
    report): the longest input is sent once before a pooling run's plan to learn it."""

    @property
    def exact_counts(self) -> bool:
        """Whether the stream can carry a cumulative token count on every chunk."""
        return self.continuous_usage or bool(self.stream_fields)


_MODELS_LEN = Source("models", "max_model_len")
_VLLM_POOL = (Source("metrics", "vllm:cache_config_info", label="kv_cache_size_tokens"),
              Source("metrics", "vllm:cache_config_info", label="num_gpu_blocks", times="block_size"))
_VLLM_BLOCK = (Source("metrics", "vllm:cache_config_info", label="block_size"),)
_VLLM_SEQS = (Source("launch", "--max-num-seqs"),)
_VLLM_PREFIX = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
_UNKNOWN_POOL = "unknown (not reported): every cell runs and queueing marks what did not fit"

ENGINES: dict[str, EngineCaps] = {
    caps.name: caps for caps in (
        EngineCaps(name="vllm", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=True, cache_salt=True,
                   tokenize_path="/tokenize", tokenize_messages=True,
                   generated_counter=("vllm:generation_tokens_total",), prefix_cache_counters=_VLLM_PREFIX,
                   sequence_limit=(_MODELS_LEN,), pool_limit=_VLLM_POOL, block_size=_VLLM_BLOCK,
                   count_limit=_VLLM_SEQS, null_blocks=1,
                   endpoint_drops=(("messages", ("ignore_eos", "min_tokens")), ("responses", ("min_tokens",))),
                   pool_note="unknown (no vllm:cache_config_info on /metrics): every cell runs "
                             "and queueing marks what did not fit",
                   launch=Launch(programs=(("vllm", "serve"), ("vllm.entrypoints.openai.api_server",)), start_s=60.0,
                                 tuned=(("--max-num-seqs", "max_num_seqs"),
                                        ("--max-num-batched-tokens", "max_num_batched_tokens"),
                                        ("--num-gpu-blocks-override", "num_gpu_blocks")))),
        EngineCaps(name="llmload-sim", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=True, cache_salt=True,
                   tokenize_path="/tokenize", tokenize_messages=True,
                   generated_counter=("vllm:generation_tokens_total",), prefix_cache_counters=_VLLM_PREFIX,
                   sequence_limit=(_MODELS_LEN,), pool_limit=_VLLM_POOL, block_size=_VLLM_BLOCK,
                   count_limit=_VLLM_SEQS, null_blocks=1, pool_note=_UNKNOWN_POOL,
                   launch=Launch(programs=(("llmload", "sim"),), start_s=2.0,
                                 tuned=(("--set max_num_seqs", "max_num_seqs"),
                                        ("--set max_num_batched_tokens", "max_num_batched_tokens"),
                                        ("--set num_gpu_blocks", "num_gpu_blocks")))),
        EngineCaps(name="sglang", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=True, cache_salt=True,
                   tokenize_path="/tokenize", tokenize_messages=True,
                   generated_counter=("sglang:generation_tokens_total",),
                   docs=("server_info", "metrics"),
                   sequence_limit=(_MODELS_LEN, Source("server_info", "context_length")),
                   pool_limit=(Source("server_info", "max_total_num_tokens"),
                               Source("metrics", "sglang:max_total_num_tokens")),
                   block_size=(Source("server_info", "page_size"),),
                   count_limit=(Source("server_info", "max_running_requests"),),
                   pool_note=_UNKNOWN_POOL,
                   launch=Launch(programs=(("sglang.launch_server",), ("sglang", "serve")), start_s=90.0,
                                 tuned=(("--max-running-requests", "max_num_seqs"),
                                        ("--chunked-prefill-size", "max_num_batched_tokens")))),
        EngineCaps(name="llama.cpp", token_id_prompts=True, ignore_eos=True, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path="/tokenize", tokenize_key="content",
                   count_fields=(("add_special", True), ("parse_special", True)),
                   answer_count_fields=(("add_special", False),),
                   apply_template_path="/apply-template",
                   stream_fields=(("timings_per_token", True),), count_key="predicted_n",
                   cold_fields=(("cache_prompt", False),), server_timings=True,
                   ended_counter=("llamacpp:tokens_predicted_total",),
                   docs=("props", "slots", "metrics"),
                   sequence_limit=(Source("props", "default_generation_settings.n_ctx"),
                                   Source("slots", "n_ctx"), Source("models", "meta.n_ctx")),
                   count_limit=(Source("props", "total_slots"),),
                   endpoint_drops=(("messages", ("ignore_eos", "stream_fields", "cold_fields", "server_timings")),),
                   pooling_batch=r"too large to process.*current batch size: (\d+)",
                   pool_note=("none: each slot holds its own n_ctx, unless the server runs with "
                              "--kv-unified (the default when -np is not given), whose shared pool "
                              "the API does not report: give it with --kv-cache-tokens"),
                   # -c is split among the -np slots (unless --kv-unified): not a pool the
                   # twin models, so a tune over -c measures every value.
                   launch=Launch(programs=(("llama-server",),), start_s=10.0,
                                 tuned=(("-np", "max_num_seqs"), ("--parallel", "max_num_seqs")))),
        EngineCaps(name="tgi", token_id_prompts=False, ignore_eos=False, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path="/tokenize", tokenize_key="inputs", docs=("info", "metrics"),
                   answer_count_fields=(),
                   sequence_limit=(Source("info", "max_total_tokens"),),
                   pool_limit=(Source("info", "max_batch_total_tokens"),
                               Source("metrics", "tgi_batch_max_total_tokens")),
                   count_limit=(Source("info", "max_batch_size"),),
                   pool_note=_UNKNOWN_POOL),
        EngineCaps(name="ollama", token_id_prompts=False, ignore_eos=False, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path=None, docs=(),
                   sequence_limit=(Source("launch", "OLLAMA_CONTEXT_LENGTH"),),
                   count_limit=(Source("launch", "OLLAMA_NUM_PARALLEL"),),
                   pool_note=_UNKNOWN_POOL),
        EngineCaps(name="trtllm", token_id_prompts=True, ignore_eos=True, min_tokens=True,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path=None, docs=(),
                   sequence_limit=(Source("launch", "--max_seq_len|--max-seq-len"),),
                   count_limit=(Source("launch", "--max_batch_size|--max-batch-size"),),
                   pool_note=_UNKNOWN_POOL),
        # Unknown OpenAI-compatible server: only the standard fields.
        EngineCaps(name="openai", token_id_prompts=False, ignore_eos=False, min_tokens=False,
                   include_usage=True, continuous_usage=False, cache_salt=False,
                   tokenize_path=None, docs=(), sequence_limit=(_MODELS_LEN,),
                   pool_note=_UNKNOWN_POOL),
    )
}

#: The server's own per-request account, wherever a stream carries it: (record field, the
#: stream's object, its key). llama.cpp puts `timings` on its chunks (every chunk with
#: timings_per_token); vLLM puts `metrics` on the final usage chunk when started with
#: --enable-per-request-metrics (its time_to_first_token_ms counts from scheduling, so it
#: excludes queue_time_ms; generation_time_ms is first to last token).
SERVER_TRUTH: tuple[tuple[str, str, str], ...] = (
    ("server_output_tokens", "timings", "predicted_n"),
    ("server_decode_ms", "timings", "predicted_ms"),
    ("server_decode_ms", "metrics", "generation_time_ms"),
    ("server_prefill_tokens", "timings", "prompt_n"),
    ("server_prefill_ms", "timings", "prompt_ms"),
    ("server_ttft_ms", "metrics", "time_to_first_token_ms"),
    ("server_queue_ms", "metrics", "queue_time_ms"),
    ("server_mean_itl_ms", "metrics", "mean_itl_ms"),
)
_COUNT_FIELDS = ("server_output_tokens", "server_prefill_tokens")


def server_truth(objects: dict[str, dict | None]) -> dict[str, int | float | None]:
    """The record's server_* fields from the stream's objects by name ("timings",
    "metrics"); a field is None where no object carries a number for it."""
    out: dict[str, int | float | None] = {name: None for name, _, _ in SERVER_TRUTH}
    for name, holder, key in SERVER_TRUTH:
        value = (objects.get(holder) or {}).get(key)
        if out[name] is not None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name in _COUNT_FIELDS:
            out[name] = value if isinstance(value, int) else None
        else:
            out[name] = float(value)
    return out


def launched_engine(words: list[str]) -> EngineCaps | None:
    """The engine a command line starts (one of its `Launch.programs` in it, a path's last
    part counting as the word), or None."""
    names = [w.rsplit("/", 1)[-1] for w in words]
    for caps in ENGINES.values():
        for prog in caps.launch.programs if caps.launch else ():
            if any(tuple(names[i:i + len(prog)]) == prog for i in range(len(names))):
                return caps
    return None


def engine_caps(name: str | None) -> EngineCaps:
    """Capabilities of a named engine; unknown names get the conservative "openai" row."""
    return ENGINES.get((name or "").lower(), ENGINES["openai"])
