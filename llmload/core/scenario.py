"""Scenario files: every run option in one YAML file, resolved with the command line.

A scenario file is a YAML mapping of option: value, with the keys of `Scenario` (hyphens or
underscores; "duration" and "request_timeout" also name the `_s` fields). Values take the
same forms as the command line: "16K" token counts, "30s"/"2m" durations, lists as YAML
lists or comma strings ("0,16K,32K"); each field's parser is in `llmload.core.scenariovalues`.

Rules:
- Precedence: command line > scenario file > defaults (`resolve`). The defaults are the
  seed page's run (`Scenario()`).
- Secrets never live in a scenario file: an API key or header is rejected with an error
  that says where it belongs (environment or flag). `Scenario` has no field for one.
- Unknown keys are errors naming the key and the valid ones; every error is a
  `ScenarioError` with one line: source (file name or "command line"), key, problem.
- `host` None means the embedded simulator (profile `sim_profile`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import yaml

from llmload.core.scenariovalues import PARSERS
from llmload.core.traffic.lengths import parse_lengths

K = 1024
#: Keys that would carry a secret: rejected in files, never fields of Scenario.
SECRET_KEYS = frozenset(
    {"api_key", "openai_api_key", "authorization", "headers", "api_token", "bearer_token"}
)
#: Other spellings accepted for a field.
KEY_ALIASES = {"duration": "duration_s", "request_timeout": "request_timeout_s"}
_FLAG_NAMES = {field: alias for alias, field in KEY_ALIASES.items()}


class ScenarioError(ValueError):
    """A bad scenario value or file; the message is one line: source, key, problem."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """Every option of a run, resolved. Defaults reproduce the seed page's run."""

    name: str = "speed-test-matrix"
    description: str = ""
    host: str | None = None
    """Base URL of the server (http://host:port); None = the embedded simulator."""
    sim_profile: str = "rtx3090-r1-qwen14b-awq"
    """Simulator profile used when host is None."""
    model: str | None = None
    """Served model name; None = the server's first model."""
    endpoint: str = "completions"
    """The protocol spoken (`llmload.core.capacity.protocols.PROTOCOLS`): "completions"
    (/v1/completions), "chat" (/v1/chat/completions), "responses" (/v1/responses) or
    "messages" (Anthropic, /v1/messages)."""
    contexts: tuple[int, ...] = (0, 16 * K, 32 * K, 48 * K)
    """Decode contexts C in tokens."""
    prefill_contexts: tuple[int, ...] = (8 * K, 16 * K, 32 * K, 48 * K)
    """Prefill contexts in tokens."""
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    """Concurrency levels N."""
    duration_s: float = 30.0
    """D: length of each decode window, seconds."""
    slice_s: float | None = None
    """--slice: every cell's figures also per consecutive slice of this many seconds of its
    window (`llmload.core.figures.slices`); None: the window whole only."""
    max_tokens: int = 8192
    """M: output tokens per decode request."""
    kv_cache_tokens: int | None = None
    """KV cache size in tokens, overriding what the server reports; None = ask the server."""
    warmup: bool = True
    """Send each user's prompt once before the window so the prefix cache holds it."""
    prefill_repeats: int = 1
    """Cold prefill requests per prefill context (the median is reported)."""
    request_timeout_s: float = 600.0
    """Per-read network timeout of a request, seconds (a 48K prefill takes ~26 s)."""
    launch_command: str | None = None
    """The server's launch command, shown on the page; None = not known."""
    workers: int | str = 0
    """Locust worker processes; 0 = generate load in the controller process; "auto" =
    chosen from the expected token-event rate (`llmload.core.capacity.autoworkers`)."""
    server_hardware: dict[str, Any] | None = None
    """What the server runs on, for the page's Hardware section (name, type, gpu, vram_gb,
    cpu, cpu_cores, ram_gb, os, or any other key): llmload cannot see a remote machine."""
    server_info: dict[str, Any] | None = None
    """Engine facts the server does not report (quantization, backend, build, revision)."""
    price_per_hour: float | None = None
    """USD per hour of the server's machine (`llmload.core.figures.cost`): every cell's cost
    per token; None: not priced."""
    slo: dict[str, float] | None = None
    """Service-level objective (`llmload.core.figures.slo`): normalised bounds, e.g. {"ttft_p99_ms": 2000.0};
    None = no SLO. Given as "ttft_p99=2s,tbt_p99=50ms,per_request_tok_s=20"."""
    energy: str = "auto"
    """GPU power and energy per token through NVML: "on", "off", or "auto" (on when the server
    runs on this machine and is not the simulator)."""
    slo_search: bool = False
    """After the matrix, bisect N between the last level meeting the SLO and the first failing
    one, per context, as extra cells (rate workload: the rate, per context)."""
    workload: str = "matrix"
    """"matrix" (the speed-test matrix), "sessions", "rate" or "replay" (`llmload.core.traffic.workloads`);
    "pooling" for the embeddings and rerank endpoints (their matrix: input length × concurrency)."""
    batch_size: int | None = None
    """Embeddings: inputs per request (None: 1)."""
    documents: int | None = None
    """Rerank: documents per request, each of the context's tokens (None: 8)."""
    images: tuple[int, ...] = ()
    """Images in each request's user message (chat; `llmload.core.traffic.images`): one
    value, or several as an axis of the matrix (each cell's count, `PlannedCell.images`);
    () for none."""
    image_size: str = "512x512"
    """A synthetic image's WIDTHxHEIGHT in pixels."""
    image_dir: str | None = None
    """A folder whose images are sent in place of synthetic ones."""
    system_prompt_tokens: tuple[int, ...] = (1024,)
    """Sessions: the shared system prompt's tokens S, one cell row per value."""
    turns: int = 4
    """Sessions: turns per conversation."""
    turn_tokens: int = 128
    """Sessions: new user tokens U per turn."""
    think_time: str = "0"
    """Sessions: seconds between an answer and the next turn ("2"; "exp:2" exponential, mean 2)."""
    rates: tuple[float, ...] = (1.0, 2.0, 4.0)
    """Rate: requests per second, one cell column per value."""
    rate_schedule: str | None = None
    """Rate: a rate that changes over the window, `--rates ramp:A..B/T[:exp]` or
    `series:...` (`llmload.core.traffic.schedule`): one cell per context, its window the
    schedule's length, in place of the rates."""
    users_schedule: str | None = None
    """Matrix and sessions: users that ramp over the window, `--concurrency ramp:A..B/T[:exp]`
    (`schedule.parse_users_ramp`): one cell per context (system prompt) of B users, each joining
    when the ramp reaches it, its window the ramp's length, in place of the concurrency levels."""
    arrivals: str = "poisson"
    """Rate: "poisson", "constant" or "gamma:CV" arrivals (`workloads.parse_arrivals`)."""
    prompt_tokens: str | None = None
    """Rate: prompt lengths drawn from a distribution in place of the contexts (one row,
    labelled by it): "N", "normal:MEAN,SD", "uniform:LO,HI" or "lognormal:MEAN,SD"
    (`llmload.core.traffic.lengths`), clipped to [1, what the server holds]."""
    output_tokens: str | None = None
    """Rate: output lengths drawn from a distribution in place of max_tokens."""
    dataset: str | None = None
    """Rate: real prompts from a dataset in place of the contexts (one row): "sharegpt:PATH",
    "jsonl:PATH" or "hf:NAME[:SPLIT]" (`llmload.core.traffic.dataset`)."""
    output_length: str = "exact"
    """Rate with a dataset: "exact" (each answer's length, ignore_eos and min_tokens) or
    "natural" (up to it: the model may stop)."""
    dataset_images: bool = False
    """Rate with a dataset, chat: send each entry's own images after its text."""
    seed: int = 0
    """The seed of the drawn lengths and of a dataset's order: the same seed sends the same."""
    cancel: float = 0.0
    """Rate and sessions: the share of requests the client closes before their end (0: none)."""
    cancel_after: str | None = None
    """When they are closed: "tokens:DIST" or "time:DIST" (`llmload.core.traffic.cancels`)."""
    repeat: int = 1
    """Times the whole plan is measured, round after round (`llmload.matrix.repeats`); with
    until_ci, the most."""
    repeat_cooldown_s: float = 0.0
    """Seconds waited between two rounds."""
    same_prompts: bool = False
    """Every round sends the same prompts (else each its own, so no round is served from the
    prefix cache the one before warmed)."""
    until_ci: float | None = None
    """Repeat a cell until its headline figure's interval half-width is within this percent
    of it (at most `repeat` times)."""
    max_in_flight: int = 256
    """Rate and replay: the most requests in flight at once (all processes); an arrival that
    finds it full waits, and the cell says so."""
    trace: str | None = None
    """Replay: the JSONL trace file (`llmload.core.traffic.trace`)."""
    speedup: float = 1.0
    """Replay: time compression of the trace's timestamps (2 = twice as fast)."""
    drain_s: float | None = None
    """Rate and replay: how long after the last due send llmload waits for the requests still
    running before it stops waiting (they count as unfinished). None: a replay waits
    REPLAY_DRAIN_S, a rate cell its window's length and at least 30 s."""
    sample: str | None = None
    """Replay: every K-th request ("4") or a seeded fraction ("0.25") of the trace
    (`llmload.core.traffic.traceshape`)."""
    length_scale: float = 1.0
    """Replay: prompt and output lengths multiplied by this, the hash-block sharing kept."""
    max_prompt_tokens: int | None = None
    """Replay: prompts cut to this many tokens, their leading hash blocks kept."""
    over_context: str = "skip"
    """Replay: what to do with trace lines whose prompt + output exceed the server's
    per-sequence limit: "skip" (counted, not sent), "clip" (prompt shortened to fit, its
    leading hash blocks kept) or "send" (sent; the server's refusals are failures)."""

    def __post_init__(self) -> None:
        # Constructing a Scenario directly validates it the same way files and flags are.
        for f in fields(self):
            try:
                value = PARSERS[f.name](getattr(self, f.name))
            except ValueError as e:
                raise ScenarioError(f"key {f.name!r}: {e}") from None
            object.__setattr__(self, f.name, value)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, not tuples) for results.json; holds no secret by construction."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple)
            else dict(v) if isinstance(v, dict) else v
            for f in fields(self)
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Scenario:
        """A Scenario from `to_dict` output (e.g. a results file's config); unknown keys are
        errors."""
        return cls(**_normalize_mapping(d, source="config"))


# --------------------------------------------------------------------------- mappings


def _canonical_key(key: Any, source: str) -> str:
    if not isinstance(key, str):
        raise ScenarioError(f"{source}: key {key!r} is not a name")
    name = key.strip().lower().replace("-", "_")
    if name in SECRET_KEYS:
        raise ScenarioError(
            f"{source}: key {key!r} is a secret and is not accepted here; "
            "pass it with --api-key or the environment"
        )
    name = KEY_ALIASES.get(name, name)
    if name not in PARSERS:
        raise ScenarioError(
            f"{source}: unknown key {key!r}; valid keys: {', '.join(PARSERS)}"
        )
    return name


def _normalize_mapping(values: Mapping[Any, Any], *, source: str) -> dict[str, Any]:
    """Canonical keys and parsed values; ScenarioError names the source and the key."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = _canonical_key(key, source)
        if name in out:
            raise ScenarioError(f"{source}: key {key!r} is given twice (as {name!r})")
        try:
            out[name] = PARSERS[name](value)
        except ValueError as e:
            # On the command line the key is the flag the user typed (--duration, --host).
            label = (f"--{_FLAG_NAMES.get(name, name).replace('_', '-')}" if source == "command line"
                     else f"key {key!r}")
            raise ScenarioError(f"{source}: {label}: {e}") from None
    return out


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(key, line)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing a key given twice in one mapping (YAML itself keeps
    the last one silently, so a file would not say what runs)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)):
                continue  # an unhashable key: the base loader says what is wrong
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_scenario(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated options a scenario file sets (only those), keyed by Scenario field."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as e:
        raise ScenarioError(f"{source}: key {e.key!r} is given twice (line {e.line})") from None
    except OSError as e:
        raise ScenarioError(f"{source}: cannot read the file: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{source}: not UTF-8 text (byte {e.start}): save the file as UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ScenarioError(f"{source}: not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: the top level must be a mapping of option: value")
    return _normalize_mapping(data, source=source)


def resolve(
    defaults: Scenario | Mapping[str, Any] | None,
    file_values: Mapping[str, Any] | None,
    cli_values: Mapping[str, Any] | None,
) -> Scenario:
    """The run's Scenario: command line > file > defaults.

    A None value in cli_values means "not given on the command line" (click's default for an
    option that was not passed), so it does not override the file.
    """
    if defaults is None:
        base = Scenario().to_dict()
    elif isinstance(defaults, Scenario):
        base = defaults.to_dict()
    else:
        base = {**Scenario().to_dict(), **_normalize_mapping(defaults, source="defaults")}
    from_file = _normalize_mapping(file_values or {}, source="scenario file")
    given = {k: v for k, v in (cli_values or {}).items() if v is not None}
    from_cli = _normalize_mapping(given, source="command line")
    return Scenario(**{**base, **from_file, **from_cli})


def rate_lengths(sc: Scenario, dataset=()) -> tuple[list[int], int, str | None]:
    """A rate plan's contexts and M, and where lengths vary per request: a dataset's prompts
    (`dataset`: its fitted requests; their mean lengths), or lengths drawn from
    distributions (`--prompt-tokens`, `--output-tokens`: their means); else the contexts and
    M as given, and None."""
    if dataset:
        mean_in = sum(r.input_tokens for r in dataset) / len(dataset)
        mean_out = sum(r.output_tokens for r in dataset) / len(dataset)
        return ([max(round(mean_in), 1)], max(round(mean_out), 1),
                f"the prompts and answer lengths of {sc.dataset} ({len(dataset):,} entries)")
    prompt = parse_lengths(sc.prompt_tokens) if sc.prompt_tokens else None
    output = parse_lengths(sc.output_tokens) if sc.output_tokens else None
    drawn = [f"{what} {d.label}" for what, d in (("prompt tokens", prompt), ("output tokens", output)) if d]
    return ([max(round(prompt.mean), 1)] if prompt else list(sc.contexts),
            max(round(output.mean), 1) if output else sc.max_tokens,
            f"{', '.join(drawn)} drawn per request, each clipped to the per-sequence limit" if drawn else None)


def session_lengths(sc: Scenario, conversations=()) -> tuple[int, int]:
    """A session plan's new tokens a turn U and output tokens a turn M: the means of a
    dataset's turns (`conversations`: (text, tokens, answer tokens) per turn), of their
    distributions where drawn (`--prompt-tokens`, `--output-tokens`), else as given."""
    turns = [t for c in conversations for t in c]
    if turns:
        return (max(round(sum(t[1] for t in turns) / len(turns)), 1),
                max(round(sum(t[2] for t in turns) / len(turns)), 1))
    return (max(round(parse_lengths(sc.prompt_tokens).mean), 1) if sc.prompt_tokens else sc.turn_tokens,
            max(round(parse_lengths(sc.output_tokens).mean), 1) if sc.output_tokens else sc.max_tokens)
