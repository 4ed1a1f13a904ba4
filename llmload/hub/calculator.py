"""The hub's calculator: the fitted twin's prediction for one context and a number of users.

The profile is fitted to a stored run (`llmload.twin.fit.fit_profile`; a run of `--images
0,2` by its cells without images, `text_cells`) or one the hub offers by name
(`offered_profiles`: the built-in profiles and those of the operator's `llmload hub
--profiles DIR`, all read when the hub starts: a request names a profile, never a file);
the prediction is `llmload.twin.predict.predict_results` for that one decode cell (and the
cold prefill of that context), in virtual time, so every figure is **predicted**: it comes
from the simulator's engine model, never from a measurement. With an SLO, the decode cell
is judged by `llmload.core.figures.slo.judge_cell`. Input that cannot be used is a `QueryError`.

What the predicted cell costs (`priced`): its cost per 1M output tokens (`pricing.output_cost`,
price / 3,600 / predicted total tok/s × 10⁶) at the price asked (`price_per_hour`), else the
fitted run's own price, else the hub operator's for the run's hardware; an offered profile has
no hardware: only a price asked prices it.

The hub runs a calculation under a CPU budget (`llmload.hub.workers`, `llmload.core.budget`):
a fit or a prediction that spends it is a BudgetSpent whose line says which, and what to ask
instead (`spent_as`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from llmload.core.budget import BudgetSpent, Cancelled
from llmload.core.model.cell import CellResult
from llmload.core.figures.slo import CellVerdict, SLOError, describe_slo, judge_cell, parse_slo
from llmload.hub.pricing import Pricing, output_cost
from llmload.hub.query import QueryError
from llmload.hub.store import Store

if TYPE_CHECKING:
    from llmload.sim.profiles import Profile

DEFAULT_MAX_TOKENS = 256
"""Output tokens per request where the source is an offered profile (a run gives its own)."""
DEFAULT_WINDOW_S = 30.0
"""The decode window predicted (virtual time) where the source is an offered profile."""
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""An offered profile's name (a --profiles file's stem)."""
NAMES_SHOWN = 30
"""The most profile names an unknown name's 400 lists."""
MAX_WINDOW_S = 120.0
MAX_OUTPUT_TOKENS = 8192


@dataclass(frozen=True, slots=True, kw_only=True)
class Calculation:
    """A prediction: where its profile came from, what was asked, and the predicted cells."""

    source: str
    """`run <id>` or the profile file or name."""
    profile: str
    context_tokens: int
    users: int
    max_tokens: int
    window_s: float
    slo: dict[str, float] | None
    slo_text: str | None
    decode: CellResult
    prefill: CellResult | None
    verdict: CellVerdict | None
    notes: tuple[str, ...]
    provenance: str = "predicted"
    pricing: Pricing = Pricing()
    """The price per hour the cost is at, and whose (`priced`)."""

    @property
    def usd_per_1m_output_tokens(self) -> float | None:
        """The decode cell's cost per 1M output tokens at `pricing` (None: no price)."""
        return output_cost(self.pricing.price_per_hour, self.decode.total_tok_s)

    def to_dict(self) -> dict:
        from llmload.core.model.document import cell_to_dict
        return {"provenance": self.provenance, "workload": "matrix", "source": self.source, "profile": self.profile,
                "context_tokens": self.context_tokens, "users": self.users, "max_tokens": self.max_tokens,
                "window_s": self.window_s, "slo": self.slo, **self.pricing.to_dict(),
                "usd_per_1m_output_tokens": self.usd_per_1m_output_tokens,
                "meets_slo": self.verdict.meets if self.verdict else None,
                "slo_failed": list(self.verdict.failed) if self.verdict else [],
                "decode": cell_to_dict(self.decode),
                "prefill": cell_to_dict(self.prefill) if self.prefill else None, "notes": list(self.notes)}


@contextmanager
def spent_as(what: str, advice: str) -> Iterator[None]:
    """A budget spent in the block (`llmload.core.budget`) raised again as the visitor's one
    line: `what` needs more than the budget, and `advice` (a cancelled job as it is)."""
    try:
        yield
    except Cancelled:
        raise
    except BudgetSpent as exc:
        raise BudgetSpent(f"{what} needs {exc}: {advice}") from None


FITTED_KEPT = 256
"""Fitted profiles kept in memory, by run id: a run's id is its content, so its fit never
changes (a fit costs about a second of CPU; the hub serves every request from one process)."""
_fitted: OrderedDict[tuple[int, str], object] = OrderedDict()


def text_cells(results) -> tuple[object, tuple[str, ...]]:
    """(a run's results for the calculator's fit, its notes): only its cells without images
    where it has images cells and a decode cell without (the twin predicts text requests: an
    image's encoding is no part of its engine model), else the run as it is, a run whose every
    request carried images said in a note."""
    if not any(cell.images for cell in results.cells):
        return results, ()
    text = tuple(cell for cell in results.cells if not cell.images)
    if any(cell.phase == "decode" for cell in text):
        return replace(results, cells=text), ("fitted to the run's cells without images; the prediction is "
                                              "for requests without images",)
    return results, ("every request of the run carried images: the fit counts their tokens as prompt tokens "
                     "and their encoding as prefill",)


def _fit(store: Store, run: str, results):
    """The run's fit, from memory where this store's run was fitted before (LRU, FITTED_KEPT)."""
    from llmload.twin.fit import fit_profile
    key = (id(store), run)
    if key in _fitted:
        _fitted.move_to_end(key)
        return _fitted[key]
    fitted = fit_profile(results, source=f"run {run}")
    _fitted[key] = fitted
    while len(_fitted) > FITTED_KEPT:
        _fitted.popitem(last=False)
    return fitted


def _from_run(store: Store, run: str):
    from llmload.twin.fit import FitError
    results = store.run(run)
    if results is None:
        raise LookupError(f"no run {run} in the store")
    results, image_notes = text_cells(results)
    try:
        with spent_as(f"fitting run {run}", "this hub does not fit a run that large"):
            fitted = _fit(store, run, results)
    except (FitError, ValueError) as exc:
        raise QueryError(f"run {run} cannot be fitted: {exc}") from None
    max_tokens = int(results.config.get("max_tokens") or DEFAULT_MAX_TOKENS)
    window = float(results.config.get("duration_s") or DEFAULT_WINDOW_S)
    return fitted.profile, f"run {run}", max_tokens, min(window, MAX_WINDOW_S), (*fitted.notes, *image_notes)


def offered_profiles(folder: str | Path | None = None) -> dict[str, Profile]:
    """The profiles the calculator offers, by name: every built-in profile and, with
    `folder` (`llmload hub --profiles DIR`), each DIR/*.json by its stem. All are read now,
    once: a request only ever names one. Raises ProfileError (one line, for the operator)
    for a file that does not load, a stem that is not a plain name (letters, digits, . _ -)
    or that is a built-in profile's."""
    from llmload.sim.profiles import ProfileError, list_profiles, load_profile
    offered: dict[str, Profile] = {name: load_profile(name) for name in list_profiles()}
    if folder is None:
        return offered
    try:
        files = sorted(p for p in Path(folder).iterdir() if p.suffix == ".json" and p.is_file())
    except OSError as exc:
        raise ProfileError(f"--profiles {folder}: {exc.strerror or exc}") from None
    for path in files:
        if not PROFILE_NAME.match(path.stem):
            raise ProfileError(f"--profiles {path}: a profile's name (its file's stem) is letters, digits, "
                               ". _ and - (at most 64)")
        if path.stem in offered:
            raise ProfileError(f"--profiles {path}: {path.stem} is a built-in profile's name; rename the file")
        offered[path.stem] = load_profile(str(path.resolve()))
    return offered


def _offered(name: str, profiles: Mapping[str, Profile]):
    profile = profiles.get(name)
    if profile is None:
        names = sorted(profiles)
        more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
        raise QueryError(f"profile: {name[:40]!r} is none of the profiles this hub offers: "
                         f"{', '.join(names[:NAMES_SHOWN])}{more}")
    return profile, name, DEFAULT_MAX_TOKENS, DEFAULT_WINDOW_S, ()


def checked_slo(slo: str | None) -> dict[str, float] | None:
    """The normalised SLO (`llmload.core.figures.slo.parse_slo`), or a QueryError."""
    try:
        return parse_slo(slo)
    except SLOError as exc:
        raise QueryError(str(exc)) from None


def profile_for(store: Store, *, run: str | None, profile: str | None, max_tokens: int | None,
                profiles: Mapping[str, Profile]):
    """(profile, source, output tokens per request, the run's window (bounded), notes) for
    a stored run to fit or an offered profile's name (exactly one of `run`, `profile`;
    `profiles`: `offered_profiles()`)."""
    if (run is None) == (profile is None):
        raise QueryError("give either run (a stored run to fit) or profile (a profile's name), not both or neither")
    prof, source, run_max_tokens, window, notes = (_from_run(store, run) if run else _offered(profile, profiles))
    out_tokens = max_tokens or run_max_tokens
    if out_tokens > MAX_OUTPUT_TOKENS:
        raise QueryError(f"max_tokens: {out_tokens} is more than {MAX_OUTPUT_TOKENS}")
    return prof, source, out_tokens, window, notes


def priced(store: Store, run: str | None, price_per_hour: float | None) -> Pricing:
    """What a prediction's cost is priced at: the price asked, else the stored run's (its own,
    else the hub's for its hardware: `Store.pricing`), else none."""
    if price_per_hour is not None:
        return Pricing(price_per_hour=price_per_hour, priced_by="asked")
    summary = store.summary(run) if run else None
    return store.pricing((summary,))[run] if summary is not None else Pricing()


def calculate(store: Store, *, run: str | None, profile: str | None, context_tokens: int, users: int,
              profiles: Mapping[str, Profile], slo: str | None = None, max_tokens: int | None = None,
              price_per_hour: float | None = None) -> Calculation:
    """The prediction for `context_tokens` and `users` from a stored run's fitted profile or
    an offered profile (exactly one of `run`, `profile`; `profiles`: `offered_profiles()`),
    its cost at `price_per_hour` where given (`priced`). Raises QueryError for input that
    cannot be used and LookupError for a run the store does not hold."""
    bounds = checked_slo(slo)
    prof, source, out_tokens, window, notes = profile_for(store, run=run, profile=profile, max_tokens=max_tokens,
                                                          profiles=profiles)
    from llmload.twin.predict import predict_results
    try:
        with spent_as("the prediction", "ask for fewer users, a shorter context or fewer output tokens"):
            results = predict_results(prof, contexts=[context_tokens],
                                      prefill_contexts=[context_tokens] if context_tokens > 0 else [],
                                      concurrency=[users], max_tokens=out_tokens, duration_s=window, slo=bounds)
    except ValueError as exc:
        raise QueryError(f"cannot predict: {exc}") from None
    decode = next(c for c in results.cells if c.phase == "decode")
    prefill = next((c for c in results.cells if c.phase == "prefill"), None)
    return Calculation(source=source, profile=prof.name, context_tokens=context_tokens, users=users,
                       max_tokens=out_tokens, window_s=window, slo=bounds,
                       slo_text=describe_slo(bounds) if bounds else None, decode=decode, prefill=prefill,
                       verdict=judge_cell(decode, bounds) if bounds else None, notes=notes,
                       pricing=priced(store, run, price_per_hour))
