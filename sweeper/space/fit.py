"""The nearest point that fits the device: the same math, a smaller memory footprint.

The numerics guard trains the starting config as its reference. Where the starting config itself
is predicted not to fit (the seed's eager micro-batch 16 of GPT-2 XL on an 80 GB H100), its
reference runs could only run out of memory, and every contender that changes the math would be
left unchecked. Neither lever below changes the math (sweeper/space/math_keys.py): activation
checkpointing recomputes the same forward, and a smaller micro-batch with a larger grad_accum
keeps the tokens per step. So the guard may run the reference at the first of, in order:
  1. each recompute lever at the point's own micro-batch, cheapest compute first (selective
     reruns no matmul; every_2 reruns half the blocks' forwards; every all of them);
  2. each smaller micro-batch (halving; grad_accum follows), with no recompute, then each lever;
that the space's rules accept (sweeper/space/constraints.py check_point, the memory model
included). A contender whose micro-batch is pinned to the reference's (the same batches) tries
only (1). Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.space.constraints import SpaceContext, check_point, derive_grad_accum
from sweeper.space.point import Point
from train.core.keys import GRAD_ACCUM, MICRO_BATCH, RECOMPUTE

LEVERS = ("selective", "every_2", "every")  # by the compute they add: 1.00x, ~1.17x, 1.33x


@dataclass(frozen=True, kw_only=True)
class Fit:
    """`point`, or the nearest point like it that fits, and what was changed to get there."""

    point: Point  # the point to run
    changed: dict[str, tuple[Any, Any]]  # {key: (was, now)}; empty when `point` fits as it is
    reason: str | None = None  # why the original point does not fit; None when it does

    def text(self) -> str:
        """Like `runtime.activation_checkpointing none -> every_2`."""
        return ", ".join(f"{k} {a} -> {b}" for k, (a, b) in self.changed.items())


def nearest_fit(
    point: Mapping[str, Any], ctx: SpaceContext, *, keep_micro_batch: bool = False
) -> Fit | None:
    """`point` (overrides over ctx.base) where the space accepts it; else the first candidate of
    the module's order that it accepts; None where the point is refused for a reason other than
    memory (no lever helps) or no candidate fits."""
    reason = check_point(point, ctx)
    if reason is None:
        return Fit(point=Point.of(point), changed={})
    if check_point(point, ctx, memory=False) is not None:
        return None  # refused whatever its memory: not this module's to fix
    point = Point.of(point)
    full = point.over(ctx.base)
    for candidate in _candidates(point, full, ctx, keep_micro_batch=keep_micro_batch):
        if check_point(candidate, ctx) is None:
            changed = {
                k: (full.get(k), candidate[k])
                for k in (MICRO_BATCH, GRAD_ACCUM, RECOMPUTE)
                if k in candidate and full.get(k) != candidate[k]
            }
            return Fit(point=candidate, changed=changed, reason=reason)
    return None


def _candidates(
    point: Point, full: dict[str, Any], ctx: SpaceContext, *, keep_micro_batch: bool
) -> list[Point]:
    """The points to try, in order: the levers at the point's micro-batch, then each smaller
    micro-batch with no recompute and then each lever."""
    micro = full.get(MICRO_BATCH)
    own = str(full.get(RECOMPUTE) or "none")
    start = LEVERS.index(own) + 1 if own in LEVERS else 0  # only heavier levers can help
    out = [point.with_knob(RECOMPUTE, lever) for lever in LEVERS[start:]]
    if keep_micro_batch or not isinstance(micro, int):
        return out
    mb = micro // 2
    while mb >= 1:
        accum = derive_grad_accum(mb, point, ctx)
        if accum is not None:
            smaller = point.with_knobs({MICRO_BATCH: mb, GRAD_ACCUM: accum})
            out += [smaller.with_knob(RECOMPUTE, lever) for lever in ("none", *LEVERS)]
        mb //= 2
    return out
