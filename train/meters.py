"""Clocks and statistics for honest step timing.

`PhaseClock` splits one step into named phases (`with clock.phase("compute"):`); on CUDA it is
given a
synchronize callback so each clock read happens after the device finished the work before it. The
statistics are pure functions over lists of floats, table-tested with fake clocks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

PHASES = ("compute", "data_wait", "optimizer", "checkpoint")


class PhaseClock:
    """Wall time per phase inside a step; the rest of the step is reported as `other`."""

    def __init__(
        self,
        *,
        sync: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._sync = sync
        self._clock = clock
        self._totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def now(self) -> float:
        """A clock read that follows a device synchronize, when one is configured."""
        if self._sync is not None:
            self._sync()
        return self._clock()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self._totals[name] += self.now() - start

    def add(self, name: str, seconds: float) -> None:
        """Charge time measured elsewhere (a loader's wait, a checkpoint stall) to a phase."""
        self._totals[name] += seconds

    def take(self) -> dict[str, float]:
        """The phase totals since the last take, then reset."""
        totals, self._totals = self._totals, dict.fromkeys(PHASES, 0.0)
        return totals


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]), the same rule as numpy's default."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """p50, p90, mean, sample std, coefficient of variation and count of a set of step times."""
    n = len(values)
    if n == 0:
        raise ValueError("no measured steps to summarize")
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "mean": mean,
        "std": std,
        "cv": std / mean if mean > 0 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": n,
    }


def time_fractions(phase_totals: Sequence[dict[str, float]], step_times: Sequence[float]) -> dict:
    """Share of measured wall time per phase; `other` is what no phase claimed. Sums to 1."""
    wall = sum(step_times)
    if wall <= 0:
        raise ValueError("measured wall time must be positive")
    fracs = {p: sum(t[p] for t in phase_totals) / wall for p in PHASES}
    claimed = sum(fracs.values())
    if claimed > 1.0:  # clock granularity can overshoot by a hair; rescale rather than go negative
        fracs = {p: f / claimed for p, f in fracs.items()}
        claimed = 1.0
    fracs["other"] = 1.0 - claimed
    return fracs


def window_rate(tokens: int, seconds: float) -> float:
    """Tokens per second over a window, guarding a zero-length window."""
    return tokens / seconds if seconds > 0 else 0.0
