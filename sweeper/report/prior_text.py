"""The prior in words: what it is on this device, and why each of its points was picked.

sweeper/plan/prior.py picks the points and returns each with its rule and numbers; plan mode's text
(sweeper/report/plan_text.py) and the sweep's start (sweeper/start.py: its log and each queued
trial's "prior" attr) say them through these functions.
"""

from __future__ import annotations

from typing import Any

from sweeper.plan.prior import Prior, PriorPoint
from train.core.keys import (
    ATTENTION,
    COMPILE,
    COMPILE_UNIT,
    DTYPE,
    MICRO_BATCH,
    RECOMPUTE,
    THREADS,
    WORKERS,
)

CPU_WHY = (
    "the FLOP arithmetic does not hold on a CPU (no datasheet peak, bf16 slower than fp32 without "
    "AMX, compile costing more than a short trial gains), so it sets only threads and workers"
)


def prior_line(prior: Prior) -> str:
    """One line on what the prior is here (or why it is off)."""
    n = len(prior.points)
    if prior.kind == "off":
        return "prior: off (hydra.sweeper.prior=false)"
    if prior.kind == "not_tpe":
        return "prior: off (only TPE queues it)"
    if prior.kind == "nothing_searched":
        return "prior: none (nothing is searched)"
    if prior.kind == "no_fit":
        return "prior: none (no point of the space fits without recompute)"
    if prior.kind == "cpu" and not n:
        return (
            f"prior: no point on this CPU ({CPU_WHY}; the starting config already has them, or "
            "the space does not search them)"
        )
    if prior.kind == "cpu":
        return f"prior: {n} point(s) on this CPU: {CPU_WHY}"
    return (
        f"prior: {n} point(s) from the memory model and the FLOP arithmetic, measured before "
        "TPE's spread-out design (a compute-bound step: largest matmuls, bf16, compiled, fused "
        "attention)"
    )


def point_text(point: PriorPoint) -> str:
    """Why the prior picked `point`, with its numbers."""
    p = point.params
    if point.rule == "largest_fit":
        return (
            f"the largest micro-batch that fits without recompute ({_knob_text(point.knobs)}): "
            "fewest, largest matmuls and no forward run twice"
        )
    if point.rule == "size_up":
        return (
            f"one micro-batch size up ({p[MICRO_BATCH]}) with the cheapest recompute that fits "
            f"({RECOMPUTE}={p[RECOMPUTE]}, {point.compute:.2f}x the compute)"
        )
    if point.rule == "lever" and point.lever is not None:
        key, value = point.lever
        refit = (
            f"; it frees memory: micro-batch {p[MICRO_BATCH]} fits without recompute"
            if point.refit
            else ""
        )
        return f"{key}={value} on the largest fit: a new lever of the compute-bound step{refit}"
    if point.rule == "cpu":
        return (
            f"on this CPU ({point.cores} cores): {_knob_text(point.knobs)}: every core to the "
            "step, and no DataLoader worker competing with it on a few cores"
        )
    raise ValueError(f"prior point rule {point.rule!r} with lever {point.lever!r} has no words")


def _knob_text(params: dict[str, Any]) -> str:
    """The knobs a reader checks first, by their short names: `micro_batch=8, dtype=bf16`."""
    short = {MICRO_BATCH: "micro_batch", RECOMPUTE: "act_ckpt"}
    keys = (MICRO_BATCH, DTYPE, COMPILE, COMPILE_UNIT, ATTENTION, THREADS, WORKERS)
    return ", ".join(f"{short.get(k, k.split('.')[-1])}={params[k]}" for k in keys if k in params)
