"""The scenario as `llmload run` (and predict, tune) runs it: its rates' schedule, its
price, and every check of its options against its workload (`workload_checked`), each a
one-line ValueError before anything runs."""

from __future__ import annotations

import os

from llmload.core.capacity.protocols import PROTOCOLS


def scheduled(values: dict) -> dict:
    """`rates: ramp:...` or `series:...` (a rate that changes over the window) is the
    scenario's rate_schedule, not its list of rates; `concurrency: ramp:...` its
    users_schedule, and its concurrency the ramp's last count. Rates or levels given as a list
    clear a schedule from under them (a scenario file's, when the command line gives a list)."""
    from llmload.core.traffic.schedule import is_schedule, parse_users_ramp
    if is_schedule(values.get("rates")):
        values = {**values, "rate_schedule": values["rates"]}
        del values["rates"]
    elif values.get("rates") is not None:
        values = {**values, "rate_schedule": ""}
    if isinstance(values.get("concurrency"), str) and values["concurrency"].strip().startswith("ramp:"):
        ramp = parse_users_ramp(values["concurrency"])
        values = {**values, "users_schedule": ramp.text, "concurrency": str(int(ramp.pieces[-1].r1))}
    elif values.get("concurrency") is not None:
        values = {**values, "users_schedule": ""}
    return values


def priced(scenario):
    """The scenario with its price per hour: --price-per-hour (or a scenario file's), else
    LLMLOAD_PRICE_PER_HOUR, else `price_per_hour` in --server-hardware; ValueError (one line)
    for one that is not a positive number."""
    from dataclasses import replace

    from llmload.core.figures.cost import PRICE_KEY, parse_price
    if scenario.price_per_hour is not None:
        return scenario
    if os.environ.get("LLMLOAD_PRICE_PER_HOUR"):
        return replace(scenario, price_per_hour=parse_price(os.environ["LLMLOAD_PRICE_PER_HOUR"],
                                                            "LLMLOAD_PRICE_PER_HOUR"))
    hardware = scenario.server_hardware or {}
    if hardware.get(PRICE_KEY) is not None:
        return replace(scenario, price_per_hour=parse_price(hardware[PRICE_KEY], f"--server-hardware {PRICE_KEY}"))
    return scenario


def workload_checked(scenario):
    """The scenario as its workload runs it (`Runner.check`: sessions use the chat API; a
    replay needs its trace, read and checked here, `TraceError`: FILE:LINE, before anything
    runs)."""
    from llmload.matrix.workloads import RUNNERS, runner_of
    runner = runner_of(scenario)
    if (scenario.batch_size or scenario.documents) and not PROTOCOLS[scenario.endpoint].pooling:
        raise ValueError("--batch-size and --documents are for --endpoint embeddings and rerank")
    if PROTOCOLS[scenario.endpoint].pooling and (scenario.slo or scenario.slo_search):
        raise ValueError(f"--slo is for the endpoints that stream; --endpoint {scenario.endpoint} has no TTFT or TBT")
    if PROTOCOLS[scenario.endpoint].pooling and runner.name != "pooling":
        _pooling_open_loop(scenario, runner)
    if scenario.image_dir and not scenario.images:
        raise ValueError("--image-dir gives the images of --images K: give K")
    if scenario.images:
        if scenario.endpoint != "chat":
            raise ValueError("--images go in chat messages: use --endpoint chat")
        if not runner.takes_images:
            raise ValueError(f"--images is for the speed test matrix, not --workload {scenario.workload}")
        if scenario.slo_search and len(scenario.images) > 1:
            raise ValueError("--slo-search bisects one matrix: give one --images K (a run per K)")
        if scenario.image_dir:
            from llmload.core.traffic.images import folder_images
            folder_images(scenario.image_dir)  # ImageError (one line) before anything runs
    _check_cancel(scenario, runner)
    if scenario.rate_schedule:
        if runner.name != "rate":
            raise ValueError(f"--rates {scenario.rate_schedule} is a rate workload's schedule, not --workload "
                             f"{scenario.workload}'s")
        if scenario.slo_search:
            raise ValueError("--slo-search bisects fixed rates: with a rate schedule, --slo alone names "
                             "where it was first missed")
        from dataclasses import replace as with_values

        from llmload.core.traffic.schedule import parse_schedule
        scenario = with_values(scenario, duration_s=parse_schedule(scenario.rate_schedule).duration_s)
    if scenario.users_schedule:
        scenario = _users_ramp(scenario, runner)
    drawn = " and ".join(r.name for r in RUNNERS.values() if r.drawn_lengths)
    if (scenario.prompt_tokens or scenario.output_tokens) and not runner.drawn_lengths:
        raise ValueError(f"--prompt-tokens and --output-tokens are for --workload {drawn} (the matrix "
                         "keeps its fixed lengths; a trace has its own)")
    if scenario.dataset and not runner.drawn_lengths:
        raise ValueError(f"--dataset is for --workload {drawn}")
    if scenario.dataset:
        if scenario.prompt_tokens or scenario.output_tokens:
            raise ValueError("--dataset gives the prompts and their answers' lengths: leave out "
                             "--prompt-tokens and --output-tokens")
        if scenario.over_context == "clip":
            raise ValueError("--over-context clip cuts a trace's token blocks; a dataset's prompts are "
                             "text: use skip or send")
        from llmload.core.traffic.dataset import load_dataset
        dataset = load_dataset(scenario.dataset)  # DatasetError (one line) before anything runs
        if scenario.dataset_images:
            if scenario.endpoint != "chat" or runner.name != "rate":
                raise ValueError("--dataset-images go in chat messages of a rate run: use --endpoint chat "
                                 "--workload rate")
            if not any(e.images for e in dataset.entries):
                raise ValueError(f"--dataset-images: no entry of {dataset.label} has an image")
    elif scenario.dataset_images:
        raise ValueError("--dataset-images sends a dataset's images: give --dataset")
    return runner.check(scenario)


def _users_ramp(scenario, runner):
    """A users ramp is for the closed-loop runs (matrix decode cells, sessions); its window is
    the ramp's length."""
    from dataclasses import replace as with_values

    from llmload.core.traffic.schedule import parse_users_ramp
    if runner.name not in ("matrix", "sessions"):
        raise ValueError(f"--concurrency {scenario.users_schedule} ramps users: for --workload matrix or "
                         f"sessions, not {runner.name}" + (" (a rate ramps with --rates ramp:...)"
                                                            if runner.name == "rate" else ""))
    if scenario.slo_search:
        raise ValueError("--slo-search bisects fixed user counts: with a users ramp, --slo alone names "
                         "where it was first missed")
    return with_values(scenario, duration_s=parse_users_ramp(scenario.users_schedule).duration_s)


def _check_cancel(scenario, runner) -> None:
    """--cancel and --cancel-after go together, on a workload whose users may leave mid-stream."""
    from llmload.core.traffic.cancels import CANCEL_WORKLOADS
    if not scenario.cancel and not scenario.cancel_after:
        return
    if not scenario.cancel or not scenario.cancel_after:
        raise ValueError("--cancel FRACTION (which requests) and --cancel-after DIST (when) go together: give both")
    if PROTOCOLS[scenario.endpoint].pooling:
        raise ValueError(f"--cancel closes a stream mid-way: --endpoint {scenario.endpoint} does not stream")
    if runner.name not in CANCEL_WORKLOADS:
        why = "a trace says what its users did" if runner.name == "replay" else "a matrix cell measures N streams in a steady state, which users leaving mid-stream break"
        raise ValueError(f"--cancel is for --workload {' and '.join(CANCEL_WORKLOADS)}, not {runner.name}: {why}")


def _pooling_open_loop(scenario, runner) -> None:
    """An embeddings or rerank endpoint in a workload of its own (the matrix), or on a
    schedule (rate, replay): one input a request."""
    if not runner.open_loop:
        raise ValueError(f"--endpoint {scenario.endpoint} runs its own matrix or arrivals on a schedule "
                         f"(rate, replay), not --workload {scenario.workload}")
    if scenario.batch_size or scenario.documents:
        raise ValueError("arrivals on a schedule send one input a request: leave out --batch-size and --documents")
