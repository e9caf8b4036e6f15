"""The memory levers a space searches, as plan mode prints them: each value of
runtime.activation_checkpointing and runtime.loss at one reference point (the prior's first point,
else the starting config), with the memory model's predicted peak, whether it fits the device,
and the compute it costs (sweeper/space/limits.py recompute_factor).

So a plan for gpt2-xl on an H100 says, before anything runs, what each lever buys at the
micro-batch the arithmetic starts from: no recompute fits compiled at micro-batch 16, the chunked
loss frees the logits, selective keeps the matmul outputs for no extra matmul FLOPs. Pure: no
torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sweeper.space.constraints import SpaceContext, check_point
from sweeper.space.limits import recompute_factor
from sweeper.space.memory import predict
from sweeper.space.point import Point
from sweeper.space.search_space import SearchSpace, baseline_params
from train.core.keys import ATTENTION, COMPILE, DTYPE, LOSS, MICRO_BATCH, N_LAYER, RECOMPUTE
from train.core.rules import resolve_dtype_name

LEVER_KEYS = (RECOMPUTE, LOSS)
# the reference point's knobs the heading names
SHOWN = (MICRO_BATCH, COMPILE, DTYPE, ATTENTION)


@dataclass(frozen=True, kw_only=True)
class LeverRow:
    """One value of one lever at the reference point."""

    key: str
    value: Any
    peak_gib: float  # the memory model's predicted peak
    fits: bool  # within the device's usable memory
    compute: float  # step compute relative to no recompute (1.0 = none)
    refused: str | None = None  # the space's reason, where it refuses the point for another rule


def lever_rows(space: SearchSpace, ctx: SpaceContext, reference: Point) -> list[LeverRow]:
    """Each searched value of each lever at `reference` (a point of `space`), on the device of
    `ctx`; [] where the device's memory is not modelled (a CPU) or no lever is searched."""
    if ctx.device_memory_gib is None:
        return []
    searched = {p.key: p for p in space.searched}
    n_layer = int(ctx.base.get(N_LAYER, 1))
    rows = []
    for key in LEVER_KEYS:
        p = searched.get(key)
        if p is None or p.kind != "categorical" or len(p.choices) < 2:
            continue
        for value in p.choices:
            point = reference.with_knob(key, value)
            full = point.over(ctx.base)
            fit = predict(
                full,
                device_type=ctx.device_type,
                bf16_supported=ctx.bf16_supported,
                device_gib=ctx.device_memory_gib,
            )
            rows.append(
                LeverRow(
                    key=key,
                    value=value,
                    peak_gib=fit.peak_gib,
                    fits=fit.fits,
                    compute=recompute_factor(full.get(RECOMPUTE), n_layer),
                    refused=check_point(point, ctx, memory=False) if fit.fits else None,
                )
            )
    return rows


def plan_lever_lines(plan: Any) -> list[str]:
    """The levers' table of a SweepPlan (sweeper/plan/build.py): at the prior's first point, else
    at the starting config where it runs."""
    space = plan.space
    ctx = space.ctx
    if plan.prior is not None and plan.prior.points:
        first = plan.prior.points[0].point
        return lever_lines(space, ctx, first, source="the prior's first point")
    if plan.start_runs:
        params = baseline_params(
            space, ctx.base, device_type=ctx.device_type, bf16=ctx.bf16_supported
        )
        reference = None if params is None else space.point(params)
        return lever_lines(space, ctx, reference, source="the starting config")
    return []


def lever_lines(
    space: SearchSpace, ctx: SpaceContext, reference: Point | None, *, source: str
) -> list[str]:
    """The levers' table for plan mode; `source` says what the reference point is."""
    if reference is None:
        return []
    rows = lever_rows(space, ctx, reference)
    if not rows:
        return []
    full = reference.over(ctx.base)
    full[DTYPE] = resolve_dtype_name(
        full.get(DTYPE), device_type=ctx.device_type, bf16_supported=ctx.bf16_supported
    )
    at = ", ".join(f"{k.split('.')[-1]}={full.get(k)}" for k in SHOWN if k in full)
    lines = [f"memory levers at {at} ({source}) on {ctx.device_name or ctx.device_type}:"]
    width = max(len(f"{r.key}={r.value}") for r in rows)
    for r in rows:
        verdict = "fits" if r.fits else "does not fit"
        if r.refused:
            verdict += f" (refused: {r.refused})"
        lines.append(
            f"  {f'{r.key}={r.value}':<{width}}  {r.peak_gib:6.1f} GiB  "
            f"{r.compute:.2f}x compute  {verdict}"
        )
    return lines
