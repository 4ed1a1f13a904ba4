"""The matrix's cells in virtual time: a cold prefill (`virtual_prefill`) and a decode cell
(`virtual_decode`), run as the runner runs them on the simulator's engine model
(`llmload.sim.virtual`); `record_of` turns what a virtual client saw into a request record.
With images (`images` K of one `ImageCost`), each prompt is its text then the K images'
ids (`llmload.twin.images`): a user's own again and again, a cold prefill's its own.
The workloads beyond the matrix: `llmload.twin.workloads`."""

from __future__ import annotations

from array import array

from llmload.core.model.cellfacts import CellFacts, ServerSample
from llmload.core.model.records import RequestRecord
from llmload.sim.engine import EngineRequest
from llmload.sim.profiles import Profile
from llmload.sim.virtual import VirtualRun, VirtualTrace
from llmload.twin.images import ImageCost, prompt_ids

WARMUP_GAP_S = 1.0
"""Virtual time between the end of the warm-up and t0 (the runner: its lead and messages)."""
WAIT_POLL_S = 1.0
"""How often the waiting queue is sampled in a window (the runner's LOAD_POLL_S)."""


# --------------------------------------------------------------------------- virtual cells


def record_of(trace: VirtualTrace, *, tag: str, prompt_tokens: int, t1: float | None) -> RequestRecord:
    times, tokens = list(trace.chunk_times_s), list(trace.chunk_tokens)
    finished = trace.finished and (t1 is None or times[-1] <= t1)
    if not finished and t1 is not None:
        keep = [i for i, t in enumerate(times) if t <= t1]
        times, tokens = [times[i] for i in keep], [tokens[i] for i in keep]
    return RequestRecord(
        user_id=trace.request_id.split("-")[0], tag=tag, send_s=trace.send_s,
        chunk_times_s=array("d", times), chunk_tokens=array("I", tokens),
        end_s=times[-1] if finished else (t1 if t1 is not None else trace.send_s),
        status="ok" if finished else "cancelled", finish_reason="length" if finished else None,
        prompt_tokens=prompt_tokens, completion_tokens=sum(tokens) if finished else None,
        cached_tokens=trace.num_cached_tokens)


def virtual_prefill(profile: Profile, prompt_tokens: int, *, images: int = 0,
                    cost: ImageCost | None = None) -> list[RequestRecord]:
    """One cold request, max_tokens 1, on an idle server."""
    run = VirtualRun(profile)
    ids, spans = prompt_ids(profile, 1, prompt_tokens, images=images, cost=cost)
    trace = run.submit(EngineRequest(request_id="p0-cold", prompt_ids=ids, num_output_tokens=1, images=spans))
    run.run_until_idle()
    return [record_of(trace, tag="prefill", prompt_tokens=prompt_tokens, t1=None)]


def virtual_decode(profile: Profile, *, prompt_tokens: int, concurrency: int, max_tokens: int,
                   window_s: float, images: int = 0,
                   cost: ImageCost | None = None) -> tuple[list[RequestRecord], CellFacts]:
    """The runner's decode cell in virtual time: records (warm-up and window) and the facts
    the runner would have gathered (window, waiting samples, preemptions)."""
    run = VirtualRun(profile)
    prompts = [prompt_ids(profile, 1000 + u, prompt_tokens, images=images, cost=cost) for u in range(concurrency)]
    warm = [run.submit(EngineRequest(request_id=f"u{u}-warm", prompt_ids=ids, num_output_tokens=1, images=spans))
            for u, (ids, spans) in enumerate(prompts)]
    run.run_until_idle()
    t0 = run.now_s + WARMUP_GAP_S
    t1 = t0 + window_s
    sequence = iter(range(10**9))

    def send(user: int, send_s: float | None = None) -> None:
        ids, spans = prompts[user]
        run.submit(EngineRequest(request_id=f"u{user}-{next(sequence)}", prompt_ids=ids,
                                 num_output_tokens=max_tokens, images=spans), send_s)

    for user in range(concurrency):
        send(user, t0)
    on_finish = (lambda r, trace: send(int(trace.request_id[1:].split("-")[0]))
                 if r.now_s < t1 else None)
    run.run_until(t0)
    preempt0 = run.engine.stats().num_preemptions
    waits = poll_waiting(run, t0, t1, on_finish)
    preempted = run.engine.stats().num_preemptions - preempt0
    run.abort_all()
    warm_ids = {t.request_id for t in warm}
    records = [record_of(t, tag="warmup" if t.request_id in warm_ids else "decode",
                       prompt_tokens=prompt_tokens, t1=None if t.request_id in warm_ids else t1)
               for t in run.traces.values()]
    # No load-generator samples: a virtual client is never the bottleneck.
    facts = CellFacts(t0_s=t0, t1_s=t1, waiting_samples=tuple(waits),
                      server_first=ServerSample(t_s=t0, preemptions=float(preempt0)),
                      server_last=ServerSample(t_s=t1, preemptions=float(preempt0 + preempted)))
    return records, facts


def poll_waiting(run: VirtualRun, t0: float, t1: float, on_finish=None) -> list[tuple[float, float]]:
    """Run to t1, sampling the waiting queue every WAIT_POLL_S from t0 as the runner does."""
    waits: list[tuple[float, float]] = []
    poll = t0 + WAIT_POLL_S / 2
    while poll < t1:
        run.run_until(poll, on_finish=on_finish)
        waits.append((poll, float(run.engine.stats().num_waiting)))
        poll += WAIT_POLL_S
    run.run_until(t1, on_finish=on_finish)
    return waits
