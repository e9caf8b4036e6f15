"""The search's last trials: the incumbent's one-knob neighbours that no trial has measured.

With a handful of trials over a few dozen points, a model-based sampler often measures points
around the best one without the best itself: in scripts/bench/sweep.py, 8 TPE trials over the
24-point grid space missed micro-batch 16 at the winner's other settings in 2 of 3 runs, though
they measured micro-batch 8 and 32 there. So the last `hydra.sweeper.budget.polish_trials` of the
budget go to a local step: the neighbours of the best few trials (one knob moved one step along an
ordered knob, or to another value of an unordered one), taken in turn by rank and queued in the
study (`enqueue_trial`) so the sampler runs them next. When a neighbour climbs to the top, the
next polish step starts from it too.

Pure: the caller filters the points through the space's constraints and queues them.
"""

from __future__ import annotations

from typing import Any

from sweeper.space.params import Param


def _ordered(values: list[Any]) -> bool:
    """Numbers (not booleans) have a direction to step along; names do not."""
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def point_key(params: dict[str, Any]) -> tuple:
    """A hashable identity of a point (values by repr, so 1 and 1.0 and True stay apart)."""
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def neighbours(
    searched: tuple[Param, ...], incumbent: dict[str, Any], *, seen: set[tuple]
) -> list[dict[str, Any]]:
    """The incumbent's one-knob neighbours not in `seen` (point_key of every point measured,
    running or queued), nearest first: a step up and a step down along each ordered knob (in
    the space's key order), then the other values of each unordered knob. A continuous float
    has no neighbour."""
    steps: list[dict[str, Any]] = []
    swaps: list[dict[str, Any]] = []
    for p in searched:
        values = p.values()
        current = incumbent.get(p.key)
        if not values or len(values) < 2 or current not in values:
            continue
        if _ordered(values):
            ordered = sorted(set(values))
            i = ordered.index(current)
            moves = [ordered[j] for j in (i + 1, i - 1) if 0 <= j < len(ordered)]
            steps += [{**incumbent, p.key: v} for v in moves]
        else:
            swaps += [{**incumbent, p.key: v} for v in values if v != current]
    out, keys = [], set(seen)
    for params in steps + swaps:
        key = point_key(params)
        if key not in keys:
            keys.add(key)
            out.append(params)
    return out


def interleave(lists: list[list[Any]], owners: list[Any]) -> list[tuple[Any, Any]]:
    """The items of `lists` taken in turn, first of each, then second of each, ..., each with
    the owner of its list: [[a1, a2], [b1]] -> (a1, A), (b1, B), (a2, A)."""
    out = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [
            (items[i], owner) for items, owner in zip(lists, owners, strict=True) if i < len(items)
        ]
    return out
