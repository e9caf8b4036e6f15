"""When a trial has measured enough: the confidence interval of its mean step time.

A measured window used to run to `trial.max_steps` (or `trial.max_seconds` past `trial.min_steps`)
whatever its spread: a trial whose steps are already tight kept measuring, one whose spread is wide
was judged on as few steps as a quiet one. With `trial.target_ci` > 0 the window also ends once the
t-based confidence interval of the mean step time is within +-target_ci of the mean, after at least
`trial.ci_min_steps` steps (and after the first checkpoint save the window is meant to measure).

    half-width / mean = t(confidence, n - 1) x sd / sqrt(n) / mean

`steps_to_ci` is the same rule run forward for a step-time coefficient of variation (CV), so plan
mode predicts the window the trial will run. Pure: no torch, no scipy (the t quantile is the
Cornish-Fisher expansion, exact forms for 1 and 2 degrees of freedom; tests/train/test_window_ci.py
checks it against scipy).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95  # two-sided confidence of the window's interval


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (0.5 < p < 1) of Student's t with `df` degrees of freedom."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf(p)
    # Cornish-Fisher expansion of t in powers of 1/df (Abramowitz & Stegun 26.7.5)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def relative_half_width(times: Sequence[float], *, confidence: float = CONFIDENCE) -> float:
    """The interval's half-width as a share of the mean step time (inf below 2 steps)."""
    n = len(times)
    if n < 2:
        return math.inf
    mean = statistics.fmean(times)
    if mean <= 0:
        return math.inf
    t = t_quantile(0.5 + confidence / 2, n - 1)
    return t * statistics.stdev(times) / math.sqrt(n) / mean


def first_ci_step(*, ci_min_steps: int, checkpoint_every: int, max_steps: int) -> int:
    """The first measured step at which the interval may end the window: `ci_min_steps`, and not
    before the first checkpoint save when one falls inside the window (the trial exists to
    measure it: time_to_train prices the save)."""
    first = max(2, ci_min_steps)
    if 0 < checkpoint_every <= max_steps:
        first = max(first, checkpoint_every)
    return min(first, max_steps)


def ci_reached(
    times: Sequence[float],
    *,
    target_ci: float,
    first_step: int,
    confidence: float = CONFIDENCE,
) -> bool:
    """Whether the window may end now: the interval rule is on (target_ci > 0), `first_step`
    steps are measured, and the mean step time is known to +-target_ci."""
    if target_ci <= 0 or len(times) < first_step:
        return False
    return relative_half_width(times, confidence=confidence) <= target_ci


def steps_to_ci(
    cv: float,
    *,
    target_ci: float,
    first_step: int,
    max_steps: int,
    confidence: float = CONFIDENCE,
) -> int:
    """The steps a window runs when its step times have coefficient of variation `cv`: the first
    n >= first_step whose interval t(n-1) x cv / sqrt(n) is within target_ci, else max_steps."""
    if target_ci <= 0:
        return max_steps
    for n in range(max(2, first_step), max_steps + 1):
        if t_quantile(0.5 + confidence / 2, n - 1) * cv / math.sqrt(n) <= target_ci:
            return n
    return max_steps
