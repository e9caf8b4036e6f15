"""Paired comparison of two configs raced in the same rounds (issue 12), torch-free.

Each round runs both configs once, so machine drift hits both sides of a pair alike; the test works
on the per-round log ratio log(contender / leader) and a one-sample t interval on its mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

FASTER = "faster"
SLOWER = "slower"
EQUIVALENT = "equivalent"
OPEN = "open"


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The contender's speed relative to the leader: ratio, its interval and the decision."""

    ratio: float
    low: float
    high: float
    rounds: int
    confidence: float
    decision: str


def log_ratios(contender: Sequence[float], leader: Sequence[float]) -> list[float]:
    """Per-round log(contender / leader) of tokens/s; rounds must pair up one to one."""
    if len(contender) != len(leader):
        raise ValueError(
            f"rounds: {len(contender)} contender and {len(leader)} leader measurements; "
            "a paired test needs one of each per round"
        )
    if any(v <= 0 for v in (*contender, *leader)):
        raise ValueError("tokens_per_s: every measurement must be > 0")
    return [math.log(c / b) for c, b in zip(contender, leader, strict=True)]


def compare(
    contender: Sequence[float],
    leader: Sequence[float],
    *,
    confidence: float = 0.95,
    margin: float = 0.02,
) -> Comparison:
    """Decide from paired rounds: equivalent (the interval of the ratio lies within +-margin),
    faster or slower (the interval excludes 1), or open."""
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"verify.confidence={confidence}: use a value in [0.5, 1), e.g. 0.95")
    diffs = log_ratios(contender, leader)
    n = len(diffs)
    if n < 2:
        mean = diffs[0] if diffs else 0.0
        ratio = math.exp(mean)
        return Comparison(
            ratio=ratio, low=0.0, high=math.inf, rounds=n, confidence=confidence, decision=OPEN
        )
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    bound = math.log1p(margin)
    # A whole interval inside +-margin is equivalent even when it excludes 1: a real but tiny
    # difference is no reason to keep the more complex config (criterion's noise threshold)
    if -bound < low and high < bound:
        decision = EQUIVALENT
    elif low > 0:
        decision = FASTER
    elif high < 0:
        decision = SLOWER
    else:
        decision = OPEN
    return Comparison(
        ratio=math.exp(mean),
        low=math.exp(low),
        high=math.exp(high),
        rounds=n,
        confidence=confidence,
        decision=decision,
    )
