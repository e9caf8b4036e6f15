"""The first trials of a TPE search: a Latin-hypercube design instead of random draws.

TPE learns nothing until `n_startup_trials` have finished; Optuna draws those at random, and a few
random points in a small discrete space often cluster (three draws from six micro-batch sizes can
all land on the small ones, leaving TPE to model a corner). A Latin hypercube spreads them: each
parameter's range is cut into n strata and every stratum is used once, the columns shuffled
independently; within its stratum a point is drawn at random. For an ordered categorical (the
micro-batch split, listed smallest first) the strata are equal runs of the list; for a numeric
range, quantiles (on the log scale where the range is logarithmic). Points the space refuses are
skipped.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

_SMALL_INT_RANGE = 64  # an int range with at most this many values is stratified by value


def _column(dist: BaseDistribution, n: int, rng: random.Random) -> list[Any]:
    """n values of one parameter, one per stratum, in shuffled order."""
    if isinstance(dist, IntDistribution) and not dist.log:
        count = (dist.high - dist.low) // dist.step + 1
        if count <= _SMALL_INT_RANGE:  # few values: strata of the value list, like a choice
            dist = CategoricalDistribution(list(range(dist.low, dist.high + 1, dist.step)))
    if isinstance(dist, CategoricalDistribution):
        k = len(dist.choices)
        values = [dist.choices[min(k - 1, int((i + rng.random()) * k / n))] for i in range(n)]
    elif isinstance(dist, IntDistribution | FloatDistribution):
        lo, hi = float(dist.low), float(dist.high)
        if dist.log:
            lo, hi = math.log(lo), math.log(hi)
        values = []
        for i in range(n):
            x = lo + (i + rng.random()) / n * (hi - lo)
            if dist.log:
                x = math.exp(x)
            if isinstance(dist, IntDistribution):
                snapped = dist.low + round((x - dist.low) / dist.step) * dist.step
                x = int(min(dist.high, max(dist.low, snapped)))
            values.append(x)
    else:
        raise ValueError(f"no design for a {type(dist).__name__}")
    rng.shuffle(values)
    return values


def latin_design(
    dists: dict[str, BaseDistribution],
    n: int,
    *,
    seed: int,
    accept: Callable[[dict[str, Any]], bool] = lambda params: True,
    attempts: int = 20,
) -> list[dict[str, Any]]:
    """Up to `n` distinct points, spread over every parameter's range, each passing `accept`.

    Refused or repeated points are dropped; the design is redrawn (new shuffles) up to
    `attempts` times to fill the gaps, so a space with few valid points yields fewer than n.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    points: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for _ in range(attempts):
        if len(points) >= n or not dists:
            break
        columns = {name: _column(dist, n, rng) for name, dist in dists.items()}
        for i in range(n):
            params = {name: col[i] for name, col in columns.items()}
            key = tuple(sorted((k, repr(v)) for k, v in params.items()))
            if key in seen or not accept(params):
                continue
            seen.add(key)
            points.append(params)
            if len(points) >= n:
                break
    return points
