"""Noise on purpose: seeded step-time jitter and stalls for the engine model.

A simulator whose figures scatter by a known amount gives the tests of confidence intervals
a server whose truth is known. `StepNoise` turns a step's modelled duration into the one the
drivers wait, and says how long the engine then stalls before its next step:
- Jitter: the duration is multiplied by an independent gamma draw with mean 1 and
  coefficient of variation `Profile.step_cv` (shape 1/cv², scale cv²).
- Stalls: a Poisson process of `Profile.stall_rate_per_s` over engine time (the jittered
  step durations laid end to end; stalls and idle time do not count). Each stall that falls
  inside a step adds `stall_ms` after it: a step of duration d has at least one with
  probability 1 − exp(−rate·d), and rate·d of them on average, so the mean time a step
  holds the engine is its noiseless duration × (1 + rate × stall_ms / 1000), exactly.
- Seeded: jitter and stalls draw from two streams, both seeded from `Profile.noise_seed`:
  the same seed gives the same draws, and the stall settings do not shift the jitter's.

Rules: the engine builds one only when `is_noisy(profile)`; with the defaults nothing is
drawn and a step takes exactly the formula's time.
"""

from __future__ import annotations

import math
import random

from llmload.sim.profiles import Profile


def is_noisy(profile: Profile) -> bool:
    """Whether the profile asks for any jitter or stalls."""
    return profile.step_cv > 0 or (profile.stall_rate_per_s > 0 and profile.stall_ms > 0)


class StepNoise:
    """The noise of one engine: its two random streams and the time left to the next stall."""

    __slots__ = ("_jitter", "_shape", "_scale", "_stalls", "_rate_per_s", "_stall_s",
                 "_to_next_stall_s")

    def __init__(self, profile: Profile) -> None:
        cv = profile.step_cv
        self._jitter = random.Random(profile.noise_seed) if cv > 0 else None
        self._shape = 1.0 / (cv * cv) if cv > 0 else math.inf
        self._scale = cv * cv
        stalls = profile.stall_rate_per_s > 0 and profile.stall_ms > 0
        # A string seed is hashed with SHA-512: stable across runs and Python versions.
        self._stalls = random.Random(f"llmload-sim-stalls:{profile.noise_seed}") if stalls else None
        self._rate_per_s = profile.stall_rate_per_s
        self._stall_s = profile.stall_ms / 1e3
        self._to_next_stall_s = (self._stalls.expovariate(self._rate_per_s)
                                 if self._stalls is not None else math.inf)

    def apply(self, duration_s: float) -> tuple[float, float]:
        """(the step's duration with jitter, the stall after it) for a step modelled at
        `duration_s`; the stall is 0.0 for most steps."""
        if self._jitter is not None:
            duration_s *= self._jitter.gammavariate(self._shape, self._scale)
        if self._stalls is None:
            return duration_s, 0.0
        left_s = self._to_next_stall_s - duration_s
        count = 0
        while left_s <= 0:  # the memoryless gaps of a Poisson process: more than one may fall in a step
            count += 1
            left_s += self._stalls.expovariate(self._rate_per_s)
        self._to_next_stall_s = left_s
        return duration_s, count * self._stall_s
