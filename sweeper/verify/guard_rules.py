"""The numerics guard's arithmetic: how far two loss curves drift apart, the tolerance measured
from the reference's own seed-to-seed spread, and the verdict on a candidate. Pure.

Both curves are per-step training losses of the same number of steps. A curve's single steps are
noisy (each step sees other batches), so curves are compared by their sliding means over a window
of a few steps: the divergence of two curves is the largest gap between their windowed means, and
the step where that window starts. The reference (the starting config) trains from two or more
seeds; the largest divergence between any two of them is the seed spread: how far the same math
drifts when only the seed (initial weights and batch order) changes. The tolerance is k x the
spread, never below a floor; a candidate trains from the reference's first seed on the same
batches, and passes when its divergence from that reference curve is within the tolerance.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def window_size(steps: int) -> int:
    """Steps per sliding window: a fifth of the curve (4 of 20 steps), at least 1."""
    return max(1, steps // 5)


def windowed_means(curve: Sequence[float], window: int) -> list[float]:
    """The mean of every `window` consecutive values (len(curve) - window + 1 of them)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if len(curve) < window:
        raise ValueError(f"a curve of {len(curve)} steps is shorter than the window ({window})")
    return [sum(curve[i : i + window]) / window for i in range(len(curve) - window + 1)]


@dataclass(frozen=True, kw_only=True)
class Divergence:
    """The largest gap between two curves' windowed means, in nats, and where it is."""

    value: float  # |mean_a - mean_b| over the worst window; inf where a curve is not finite
    step: int  # the worst window's first step (0-based)
    window: int


def divergence(a: Sequence[float], b: Sequence[float], *, window: int) -> Divergence:
    """How far curve `a` drifts from curve `b`: over their common length, the largest gap between
    their `window`-step means. A non-finite loss in either is an infinite divergence."""
    n = min(len(a), len(b))
    if n == 0:
        raise ValueError("cannot compare an empty loss curve")
    window = min(window, n)
    gaps = [
        abs(x - y)
        for x, y in zip(windowed_means(a[:n], window), windowed_means(b[:n], window), strict=True)
    ]
    worst = max(range(len(gaps)), key=lambda i: (not math.isfinite(gaps[i]), gaps[i]))
    value = gaps[worst] if math.isfinite(gaps[worst]) else math.inf
    return Divergence(value=value, step=worst, window=window)


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """The guard's tolerance and how it was derived from the reference's seeds."""

    value: float  # max(k x spread, floor), nats
    spread: float  # the largest divergence between two reference seeds, nats
    k: float
    floor: float
    window: int
    pairs: tuple[tuple[int, int, Divergence], ...]  # (seed a, seed b, their divergence)

    def as_dict(self) -> dict:
        """The numbers, for the study's record (sweeper/verify/guard_text.py: the derivation)."""
        return {
            "value": self.value,
            "spread": self.spread,
            "k": self.k,
            "floor": self.floor,
            "window": self.window,
        }


def tolerance(
    curves: Mapping[int, Sequence[float]], *, k: float, floor: float, window: int
) -> Tolerance:
    """The tolerance from the reference's curves by seed (two or more): k x their largest
    pairwise divergence, at least `floor`."""
    if len(curves) < 2:
        raise ValueError(f"a seed spread needs at least 2 reference curves, got {len(curves)}")
    pairs = tuple(
        (a, b, divergence(curves[a], curves[b], window=window))
        for a, b in itertools.combinations(sorted(curves), 2)
    )
    spread = max(d.value for _, _, d in pairs)
    return Tolerance(
        value=max(k * spread, floor), spread=spread, k=k, floor=floor, window=window, pairs=pairs
    )


@dataclass(frozen=True, kw_only=True)
class Descent:
    """How far the reference's curves fall from their first window to their last, against the
    seed spread: a reference that does not train (a loss that is not finite, or that falls by no
    more than the same math drifts between seeds) is no reference, and the guard judges nothing
    against it."""

    drop: float  # the smallest fall over the seeds, nats (first window's mean - last window's)
    seed: int  # the seed whose curve falls least
    spread: float  # the tolerance's seed spread, nats
    window: int

    @property
    def trains(self) -> bool:
        return math.isfinite(self.drop) and self.drop > max(self.spread, 0.0)


def descent(curves: Mapping[int, Sequence[float]], *, spread: float, window: int) -> Descent:
    """The reference's least descent over its seeds' curves (Descent.trains says if it trained)."""
    if not curves:
        raise ValueError("descent needs at least one reference curve")

    def fall(curve: Sequence[float]) -> float:
        if not curve or not all(math.isfinite(x) for x in curve):
            return math.nan
        means = windowed_means(curve, min(window, len(curve)))
        return means[0] - means[-1]

    falls = {seed: fall(c) for seed, c in curves.items()}
    seed = min(falls, key=lambda s: (math.isfinite(falls[s]), falls[s]))
    return Descent(drop=falls[seed], seed=seed, spread=spread, window=window)


@dataclass(frozen=True, kw_only=True)
class GuardCheck:
    """A candidate's verdict: within the tolerance or not, and the numbers that decided it
    (sweeper/verify/guard_text.py says it in one sentence)."""

    passed: bool
    divergence: Divergence
    tolerance: float
    window: int  # the tolerance's window, steps
    steps: int  # the steps both curves ran
    mean_gap: float  # candidate - reference, mean loss over those steps, nats
    last: tuple[float, float]  # the last common step's loss: candidate, reference


def check(candidate: Sequence[float], reference: Sequence[float], tol: Tolerance) -> GuardCheck:
    """Whether `candidate` stays within `tol` of `reference` (the same seed, the same batches)."""
    d = divergence(candidate, reference, window=tol.window)
    n = min(len(candidate), len(reference))
    mean_gap = (sum(candidate[:n]) - sum(reference[:n])) / n
    return GuardCheck(
        passed=d.value <= tol.value,
        divergence=d,
        tolerance=tol.value,
        window=tol.window,
        steps=n,
        mean_gap=mean_gap,
        last=(candidate[n - 1], reference[n - 1]),
    )


def curve_text(curve: Sequence[float]) -> str:
    """A curve as the report prints it: every step's loss to 3 decimals."""
    return " ".join(f"{x:.3f}" for x in curve)


def curve_run_s(
    result: Mapping[str, object] | None, *, steps: int, step_share: float = 1.0
) -> float | None:
    """A curve run's wall predicted from a complete trial result of the same config: its wall,
    less its measured window, plus `steps` full steps at the window's median, each scaled by
    `step_share`: the curve step's tokens over the config's (guard.tokens caps it).
    None without a usable result.

    The window's median is a full step whether it was measured or projected from short steps
    (train/trial/window.py). Not `full_step_estimate_s`: that is sized from the last warm-up
    step, which holds the compile when there is one warm-up step (91.3 s for a 21.6 s gpt2-xl
    step on the H200), and priced every curve step as a compile."""
    if not result or result.get("status") != "complete":
        return None
    times = result.get("step_time_s") or {}
    full, n, wall = times.get("p50"), times.get("n"), result.get("wall_s")
    # the window's own seconds in the wall: the short steps it ran when it projected
    short = ((result.get("projection") or {}).get("short_step_s") or {}).get("p50")
    ran = short if isinstance(short, int | float) else full
    if not all(isinstance(v, int | float) for v in (full, wall, n, ran)):
        return None
    return max(0.0, float(wall) - float(n) * float(ran)) + steps * float(full) * step_share
