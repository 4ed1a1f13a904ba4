"""The engine model behind the simulated server: pure, clock-free, no I/O.

`Engine` imitates vLLM's V1 scheduler one step at a time. A driver (the HTTP server in real
time, `llmload.sim.virtual` in virtual time) adds requests, calls `step()`, waits the step's
`duration_s`, then hands out the tokens the step produced. Rules, as on vLLM:
- Continuous batching: every step first serves the running sequences in admission order
  (a decode needs 1 token of the step's budget, or `tokens_per_chunk`), then admits waiting
  ones while the budget (`max_num_batched_tokens`), `max_num_seqs` and free KV blocks allow.
  A prompt longer than the budget left is prefilled in chunks over several steps.
- KV cache: a pool of `num_gpu_blocks` blocks of `block_size` tokens, allocated as tokens are
  computed. A waiting request is admitted only when the blocks for its next chunk fit; if a
  running sequence cannot grow, the most recently admitted one is preempted (its blocks are
  freed, it goes back to the front of the queue and is recomputed later).
- Prefix cache: full prompt blocks are keyed by a hash chained over the token ids, seeded
  with the request's cache_salt. A new request reuses the longest run of cached blocks, but
  at least its last prompt token is always computed (the hit is capped at
  ⌊(P − 1) / block_size⌋ blocks). Freed blocks stay cached until reused, least recently
  freed first, the tail of a sequence before its head.
- Step time (ms) = step_base_ms + step_per_seq_ms × scheduled sequences
  + step_per_kv_token_us / 1000 × KV tokens of the decoding sequences + prefill cost, where a
  prefill chunk of c tokens at position p costs prefill_per_token_us × c / 1000
  + prefill_quadratic_ns × ((p + c)² − p²) / 1e6. Over the chunks of a cold prompt of C
  tokens the prefill cost telescopes to a·C + b·C². A step with images adds their
  vision-encoder cost (next rule).
- Images (`EngineRequest.images`, `llmload.sim.images`): their tokens are prompt tokens,
  scheduled, cached and costed as any. On top, the vision encoder: the step whose chunk first
  reaches an image's tokens, from its first token not served from the prefix cache, costs
  image_encoder_per_tile_ms × the image's tiles more, once per image (again after a
  preemption, whose recompute encodes it again); an image wholly in the prefix-cache hit
  costs nothing. As vLLM V1 schedules an encoder input: the whole image is encoded in the
  step whose chunk takes any of its tokens (its encoder cache then serves the later chunks).
  vLLM's encoder budget per step (max_num_encoder_input_tokens) is not modelled.
- The step that finishes a prefill yields 1 token; a decode step yields `tokens_per_chunk`.
  Outputs belong to the end of the step: a driver must not deliver them before
  `duration_s` has passed.
- Pooling (an embeddings input or a rerank pair, `EngineRequest.pooling`): a prefill and
  nothing more, scheduled and costed as any prefill; the step that ends it yields the one
  output (the pooled result, not a generated token: generation_tokens does not count it).
  It neither reads nor fills the prefix cache, but its prompt is counted as queried (with
  no hit), as vLLM 0.32's metrics count a pooling model's requests
  (vllm:prefix_cache_queries_total = vllm:prompt_tokens_total, hits 0).
- Noise, only if the profile asks for it (`llmload.sim.noise`): the step time is multiplied
  by a seeded draw of mean 1, and a stall may follow the step (`stall_s`: a driver delivers
  the step's outputs, then waits that long before the next step). With the defaults nothing
  is drawn and the step time is the formula's, exactly.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Sequence

from llmload.sim.noise import StepNoise, is_noisy
from llmload.sim.profiles import Profile

_HASH_SEED = "llmload-sim-prefix"


@dataclass(frozen=True, slots=True)
class ImageSpan:
    """One image's tokens in a prompt: `num_tokens` from position `start`, of `tiles` tiles."""

    start: int
    num_tokens: int
    tiles: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRequest:
    """A request as the engine sees it: token ids in, a known number of tokens out."""

    request_id: str
    prompt_ids: Sequence[int]
    num_output_tokens: int
    """How many tokens the request will produce (the driver decided: max_tokens or EOS)."""
    cache_salt: str | None = None
    block_hashes: Sequence[int] | None = None
    """`block_hashes(prompt_ids, block_size, cache_salt)`, if the driver computed them
    already (the server does, outside its scheduler loop, to keep steps on time)."""
    pooling: bool = False
    """A pooling input (module docstring): prefill only, num_output_tokens 1, no prefix cache."""
    images: Sequence[ImageSpan] = ()
    """Where the prompt's images lie, in prompt order (their vision-encoder cost)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqOutput:
    """Tokens one sequence produced in one step."""

    request_id: str
    first_index: int
    """Output index of the first token produced in this step."""
    num_tokens: int
    finished: bool
    num_cached_tokens: int
    """Prompt tokens served from the prefix cache when the request was first admitted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    duration_s: float
    outputs: tuple[SeqOutput, ...]
    num_scheduled: int
    num_prefill_tokens: int
    num_decode_tokens: int
    stall_s: float = 0.0
    """A pause after the step, once its outputs are out, before the next step starts
    (`Profile.stall_ms` per stall; 0.0 without stalls)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStats:
    """A snapshot for /metrics; token counters are cumulative."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    """Fraction of KV blocks held by sequences (0..1), as vllm:kv_cache_usage_perc."""
    num_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prompt_tokens: int
    generation_tokens: int
    num_steps: int
    busy_s: float
    """Sum of the modelled durations of all steps (with their jitter; stalls not included)."""


class BlockPool:
    """KV blocks: reference counts, an LRU free queue and the prefix-cache index."""

    __slots__ = ("num_blocks", "_free", "_refs", "_hash_of", "_cached")

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        # Evict from the front: the least recently freed block goes first.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._refs = [0] * num_blocks
        self._hash_of: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int] | None:
        """`count` fresh blocks, evicting cached ones as needed; None if they do not fit."""
        if count > len(self._free):
            return None
        blocks = []
        for _ in range(count):
            block, _ = self._free.popitem(last=False)
            old_hash = self._hash_of[block]
            if old_hash is not None:
                del self._cached[old_hash]
                self._hash_of[block] = None
            self._refs[block] = 1
            blocks.append(block)
        return blocks

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """Blocks of the longest cached prefix of `hashes`."""
        found = []
        for block_hash in hashes:
            block = self._cached.get(block_hash)
            if block is None:
                break
            found.append(block)
        return found

    def touch(self, blocks: Sequence[int]) -> None:
        for block in blocks:
            if self._refs[block] == 0:
                del self._free[block]
            self._refs[block] += 1

    def release(self, blocks: Sequence[int]) -> None:
        # Tail first, so a sequence's last blocks are evicted before its shared head.
        for block in reversed(blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free[block] = None

    def register(self, block: int, block_hash: int) -> None:
        if block_hash not in self._cached and self._hash_of[block] is None:
            self._cached[block_hash] = block
            self._hash_of[block] = block_hash


class _Seq:
    """A request inside the engine (mutable; never leaves this module)."""

    __slots__ = (
        "request_id", "prompt", "num_prompt", "salt", "target", "num_output",
        "num_computed", "blocks", "hashes", "num_registered", "num_cached_tokens",
        "prompt_counted", "pooling", "images", "num_encoded",
    )

    def __init__(self, request: EngineRequest) -> None:
        self.request_id = request.request_id
        self.prompt = request.prompt_ids
        self.num_prompt = len(request.prompt_ids)
        self.salt = request.cache_salt
        self.target = request.num_output_tokens
        self.num_output = 0
        self.num_computed = 0
        self.blocks: list[int] = []
        self.hashes = request.block_hashes
        self.num_registered = 0
        self.num_cached_tokens: int | None = None
        self.prompt_counted = False
        self.pooling = request.pooling
        self.images = request.images
        self.num_encoded = 0
        """Images (in prompt order) whose encoder cost is paid since the last (re)start."""


def block_hashes(prompt: Sequence[int], block_size: int, salt: str | None) -> list[int]:
    """Chained hashes of the full blocks of `prompt`; the salt seeds the chain."""
    chain = hash((_HASH_SEED, salt))
    hashes = []
    for start in range(0, len(prompt) - block_size + 1, block_size):
        chain = hash((chain, tuple(prompt[start:start + block_size])))
        hashes.append(chain)
    return hashes


class Engine:
    """The scheduler and KV cache of one simulated vLLM engine."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._bs = profile.block_size
        self._k = profile.tokens_per_chunk
        self._pool = BlockPool(profile.usable_kv_blocks)
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._by_id: dict[str, _Seq] = {}
        self._preemptions = 0
        self._queries = 0
        self._hits = 0
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._steps = 0
        self._busy_s = 0.0
        self._noise = StepNoise(profile) if is_noisy(profile) else None

    # -- requests ---------------------------------------------------------------------
    def add(self, request: EngineRequest) -> None:
        if request.request_id in self._by_id:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.num_output_tokens < 1 or not request.prompt_ids:
            raise ValueError("a request needs a prompt and at least one output token")
        if request.pooling and request.num_output_tokens != 1:
            raise ValueError("a pooling request has exactly one output (its pooled result)")
        # The last output token is never fed back: its KV is never written.
        blocks = -(-(len(request.prompt_ids) + request.num_output_tokens - 1) // self._bs)
        if blocks > self._pool.num_blocks:
            raise ValueError(f"request {request.request_id!r} needs {blocks} KV blocks; "
                             f"the pool has {self._pool.num_blocks}")
        seq = _Seq(request)
        self._by_id[seq.request_id] = seq
        self._waiting.append(seq)

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its blocks at once; False if it is not here (any more)."""
        seq = self._by_id.pop(request_id, None)
        if seq is None:
            return False
        if seq in self._waiting:
            self._waiting.remove(seq)
        else:
            self._running.remove(seq)
        self._free(seq)
        return True

    @property
    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    def stats(self) -> EngineStats:
        pool = self._pool
        return EngineStats(
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            kv_cache_usage=1.0 - pool.num_free / pool.num_blocks,
            num_preemptions=self._preemptions,
            prefix_cache_queries=self._queries,
            prefix_cache_hits=self._hits,
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
            num_steps=self._steps,
            busy_s=self._busy_s,
        )

    # -- one step ---------------------------------------------------------------------
    def step(self) -> StepResult:
        """Schedule one step, account its KV and cost, and return what it produces."""
        budget = self.profile.max_num_batched_tokens
        scheduled: list[tuple[_Seq, int]] = []
        budget, preempted = self._schedule_running(budget, scheduled)
        if not preempted:
            self._admit_waiting(budget, scheduled)
        return self._execute(scheduled)

    def _schedule_running(self, budget: int, scheduled: list[tuple[_Seq, int]]) -> tuple[int, bool]:
        running = self._running
        preempted = False
        index = 0
        while index < len(running) and budget > 0:
            seq = running[index]
            count = min(seq.num_prompt + seq.num_output - seq.num_computed, budget)
            while not self._grow(seq, count):
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                scheduled.append((seq, count))
                budget -= count
                index += 1
        return budget, preempted

    def _admit_waiting(self, budget: int, scheduled: list[tuple[_Seq, int]]) -> None:
        waiting = self._waiting
        while waiting and budget > 0 and len(self._running) < self.profile.max_num_seqs:
            seq = waiting[0]
            hit = self._prefix_hit(seq)
            self._pool.touch(hit)
            seq.blocks = list(hit)
            seq.num_computed = len(hit) * self._bs
            seq.num_registered = len(hit)
            count = min(seq.num_prompt + seq.num_output - seq.num_computed, budget)
            if not self._grow(seq, count):
                self._pool.release(hit)
                seq.blocks = []
                seq.num_computed = seq.num_registered = 0
                break
            waiting.popleft()
            self._running.append(seq)
            self._count_query(seq, len(hit) * self._bs)
            scheduled.append((seq, count))
            budget -= count

    def _prefix_hit(self, seq: _Seq) -> list[int]:
        if not self.profile.enable_prefix_caching or seq.pooling:
            return []
        if seq.hashes is None:
            seq.hashes = block_hashes(seq.prompt, self._bs, seq.salt)
        # At least the last token is recomputed: its logits give the next token.
        max_blocks = (seq.num_prompt + seq.num_output - 1) // self._bs
        return self._pool.lookup(seq.hashes[:max_blocks])

    def _count_query(self, seq: _Seq, hit_tokens: int) -> None:
        if seq.num_cached_tokens is None:
            seq.num_cached_tokens = hit_tokens
        self._queries += seq.num_prompt
        self._hits += hit_tokens

    def _grow(self, seq: _Seq, count: int) -> bool:
        """Make room for `count` more computed tokens; False if the pool is too full."""
        needed = -(-(seq.num_computed + count) // self._bs) - len(seq.blocks)
        if needed <= 0:
            return True
        blocks = self._pool.allocate(needed)
        if blocks is None:
            return False
        seq.blocks.extend(blocks)
        return True

    def _preempt(self, seq: _Seq) -> None:
        self._free(seq)
        seq.num_computed = 0
        seq.num_encoded = 0
        self._waiting.appendleft(seq)
        self._preemptions += 1

    def _free(self, seq: _Seq) -> None:
        self._pool.release(seq.blocks)
        seq.blocks = []
        seq.num_registered = 0

    def _execute(self, scheduled: list[tuple[_Seq, int]]) -> StepResult:
        profile = self.profile
        kv_decode_tokens = 0
        prefill_tokens = decode_tokens = 0
        prefill_ms = 0.0
        outputs = []
        finished = []
        for seq, count in scheduled:
            start = seq.num_computed
            if seq.num_output and count <= self._k:
                decode_tokens += count
                kv_decode_tokens += start + count
            else:
                prefill_tokens += count
                prefill_ms += self._prefill_ms(start, count)
            if seq.images:
                prefill_ms += self._encoder_ms(seq, start, start + count)
            seq.num_computed = start + count
            self._register_blocks(seq)
            if seq.num_computed == seq.num_prompt + seq.num_output:
                outputs.append(self._sample(seq))
                if seq.num_output >= seq.target:
                    finished.append(seq)
        for seq in finished:
            self._finish(seq)
        duration_ms = (
            profile.step_base_ms
            + profile.step_per_seq_ms * len(scheduled)
            + profile.step_per_kv_token_us * kv_decode_tokens / 1e3
            + prefill_ms
        ) if scheduled else 0.0
        self._steps += 1 if scheduled else 0
        duration_s = duration_ms / 1e3
        stall_s = 0.0
        if self._noise is not None and scheduled:
            duration_s, stall_s = self._noise.apply(duration_s)
        self._busy_s += duration_s
        return StepResult(
            duration_s=duration_s,
            outputs=tuple(outputs),
            num_scheduled=len(scheduled),
            num_prefill_tokens=prefill_tokens,
            num_decode_tokens=decode_tokens,
            stall_s=stall_s,
        )

    def _prefill_ms(self, start: int, count: int) -> float:
        end = start + count
        return (
            self.profile.prefill_per_token_us * count / 1e3
            + self.profile.prefill_quadratic_ns * (end * end - start * start) / 1e6
        )

    def _encoder_ms(self, seq: _Seq, start: int, end: int) -> float:
        """Vision-encoder time of the images that the chunk [start, end) reaches first."""
        tiles = 0
        images = seq.images
        while seq.num_encoded < len(images) and images[seq.num_encoded].start < end:
            image = images[seq.num_encoded]
            if image.start + image.num_tokens > start:  # not wholly in the prefix-cache hit
                tiles += image.tiles
            seq.num_encoded += 1
        return self.profile.image_encoder_per_tile_ms * tiles

    def _register_blocks(self, seq: _Seq) -> None:
        hashes = seq.hashes
        if hashes is None or seq.num_registered >= len(hashes) \
                or not self.profile.enable_prefix_caching or seq.pooling:
            return  # the common decode case: every prompt block is registered already
        full = min(seq.num_computed // self._bs, len(hashes))
        for index in range(seq.num_registered, full):
            self._pool.register(seq.blocks[index], hashes[index])
        seq.num_registered = max(seq.num_registered, full)

    def _sample(self, seq: _Seq) -> SeqOutput:
        first = seq.num_output
        count = 1 if first == 0 else min(self._k, seq.target - first)
        seq.num_output = first + count
        if not seq.pooling:
            self._generation_tokens += count
        if not seq.prompt_counted:
            seq.prompt_counted = True
            self._prompt_tokens += seq.num_prompt
        return SeqOutput(
            request_id=seq.request_id,
            first_index=first,
            num_tokens=count,
            finished=seq.num_output >= seq.target,
            num_cached_tokens=seq.num_cached_tokens or 0,
        )

    def _finish(self, seq: _Seq) -> None:
        self._running.remove(seq)
        del self._by_id[seq.request_id]
        self._free(seq)


class Frontend:
    """The API server's request handling before the engine sees a request.

    Models one event loop: the per-request and per-token part of the work (parsing,
    tokenizing, hashing a long prompt) is serial across requests, first come first served;
    the base latency overlaps. `ready_time_s` says when a request that arrived at `arrival_s` reaches the
    scheduler; calls must come in arrival order.
    """

    __slots__ = ("profile", "_busy_until_s")

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._busy_until_s = -math.inf

    def ready_time_s(self, arrival_s: float, num_prompt_tokens: int) -> float:
        profile = self.profile
        serial_s = (
            profile.frontend_per_request_ms / 1e3
            + profile.frontend_per_token_us * num_prompt_tokens / 1e6
            + profile.frontend_quadratic_ns * num_prompt_tokens * num_prompt_tokens / 1e9
        )
        self._busy_until_s = max(arrival_s, self._busy_until_s) + serial_s
        return (self._busy_until_s + profile.frontend_base_ms / 1e3
                + profile.frontend_latency_per_token_us * num_prompt_tokens / 1e6)
