"""The space scanned against the constraints, the memory model and the trial limits.

The space is scanned on the keys that the constraints, the memory model and the trial limits read
(PLAN_KEYS); every other searched key only multiplies the count, so a space of 400,000 points is
scanned in a few thousand evaluations. A real sweep runs the same scan at start-up to say how many
feasible points the memory model drops, and to drop the choices no runnable point has before the
sampler sees them; plan mode (sweeper/plan/build.py) prints it. Pure: no torch, no I/O.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sweeper.forecast import TrialTime, trial_compile_s
from sweeper.forecast.costs import ProcessCosts, costs_for
from sweeper.space.constraints import SpaceContext, cheaper_recompute, check_point
from sweeper.space.limits import TrialLimits, point_limits
from sweeper.space.memory import oom_reason, predict
from sweeper.space.search_space import SAMPLE_POINTS, SearchSpace
from train.core.keys import (
    ATTENTION,
    CHECKPOINT_EVERY,
    COMPILE,
    COMPILE_UNIT,
    DEVICE,
    DTYPE,
    FLOAT8,
    FLOAT8_EMULATE,
    GRAD_ACCUM,
    LOSS,
    MICRO_BATCH,
    N_LAYER,
    RECOMPUTE,
    TF32,
    TOKENS_PER_STEP,
    WORKERS,
)
from train.core.rules import resolve_dtype_name

# Keys read by the constraints (sweeper/space/search_space.py), the memory model and the trial
# limits; a searched key outside these (and outside model.* / trial.*) never changes whether a point
# runs or how long it takes, so it is counted, not enumerated.
PLAN_KEYS = (
    MICRO_BATCH,
    GRAD_ACCUM,
    TOKENS_PER_STEP,
    DEVICE,
    COMPILE,
    DTYPE,
    TF32,
    ATTENTION,
    RECOMPUTE,
    WORKERS,
    CHECKPOINT_EVERY,
    FLOAT8,
    FLOAT8_EMULATE,  # float8's rule reads the dtype and the device
    LOSS,  # the memory model reads it (the chunked loss holds no full logits)
)
# runtime.compile_unit is counted, not enumerated: it never changes whether a point runs, only its
# expected compile, which the forecast prices lower for a block-compiled model (so the scan's
# limits, at the base config's unit, err long, and its mean trial averages the units' compiles:
# _unit_mean_wall); enumerating it would double the scan of search=throughput past ENUMERATE_LIMIT
PLAN_PREFIXES = ("model.", "trial.")
# The knobs a memory estimate depends on (train.core.memory_model.MemoryInputs), as
# printed.
MEMORY_KNOBS = (
    MICRO_BATCH,
    DTYPE,
    ATTENTION,
    RECOMPUTE,
    COMPILE,
    LOSS,
)
# The knobs a point's floor, predicted step and trial limits depend on most, as printed.
CLASS_KNOBS = (COMPILE, RECOMPUTE)
ENUMERATE_LIMIT = 100_000  # planned combinations scanned exhaustively; beyond, sampled


@dataclass(frozen=True, kw_only=True)
class DroppedGroup:
    """Points the memory model drops that share the knobs their memory depends on."""

    knobs: dict[str, Any]  # MEMORY_KNOBS -> value (dtype resolved)
    peak_gib: float  # predicted peak device memory
    points: int  # points of the space with these knobs


@dataclass(kw_only=True)
class PointClass:
    """Runnable points that share precision, compile mode and activation checkpointing."""

    knobs: dict[str, Any]  # "precision" (bf16 | fp16 | tf32 | fp32) and CLASS_KNOBS
    floor_s: float | None  # step at 100% of the datasheet peak (train/core/flops.py)
    step_s: float  # predicted step at ASSUMED_MFU
    timeout_s: float  # the largest hard limit in the class
    stall_timeout_s: float | None  # the largest stall limit (None: stall check off)
    points: int = 0
    wall_total_s: float = 0.0  # sum of expected trial walls, for the mean
    wall_min_s: float = math.inf
    wall_max_s: float = 0.0

    @property
    def wall_mean_s(self) -> float:
        return self.wall_total_s / self.points if self.points else 0.0


@dataclass(kw_only=True)
class Scan:
    """The space against the constraints, the memory model and the trial limits."""

    total: int  # points of the space (combinations of every searched value)
    sampled: bool  # True when the planned keys were sampled, not enumerated (counts are scaled)
    refused: int = 0  # points the constraints refuse
    reasons: Counter[str] = field(default_factory=Counter)  # refusal reason -> points
    oom_refused: int = 0  # points an out-of-memory trial of this sweep rules out
    dropped: list[DroppedGroup] = field(default_factory=list)  # by the memory model
    # points that fit but cannot win (sweeper/space/dominance.py): (recompute, the cheaper
    # choice that fits) -> points
    dominated: Counter[tuple[str, str]] = field(default_factory=Counter)
    kept: int = 0  # points that run
    classes: list[PointClass] = field(default_factory=list)
    dead_values: dict[str, list[Any]] = field(default_factory=dict)  # values no runnable point has
    wall_total_s: float = 0.0  # sum of expected trial walls over kept points

    @property
    def feasible(self) -> int:
        """Points the constraints accept (before the memory rules)."""
        return self.total - self.refused

    @property
    def dropped_points(self) -> int:
        return sum(g.points for g in self.dropped)

    @property
    def dominated_points(self) -> int:
        return sum(self.dominated.values())

    @property
    def mean_trial_s(self) -> float | None:
        return self.wall_total_s / self.kept if self.kept else None


def _planned(key: str) -> bool:
    return key in PLAN_KEYS or key.startswith(PLAN_PREFIXES)


def _combos(space: SearchSpace) -> tuple[Iterator[dict[str, Any]], int, int, bool]:
    """(searched params, weight per combination, total points, sampled): the planned keys
    enumerated (or sampled), the others at their first value and counted in the weight."""
    planned = [p for p in space.searched if _planned(p.key)]
    free = [p for p in space.searched if not _planned(p.key)]
    free_values = {p.key: (p.values() or [p.low]) for p in free}
    weight = math.prod(len(v) for v in free_values.values())
    lists = [p.values() for p in planned]
    first = {k: v[0] for k, v in free_values.items()}
    keys = [p.key for p in planned]
    if all(v is not None for v in lists) and math.prod(len(v) for v in lists) <= ENUMERATE_LIMIT:
        total = math.prod(len(v) for v in lists) * weight  # type: ignore[arg-type]
        combos = itertools.product(*lists)  # type: ignore[arg-type]
        return ({**first, **dict(zip(keys, c, strict=True))} for c in combos), weight, total, False
    rng = random.Random(0)
    sizes = [len(v) if v is not None else 0 for v in lists]
    total = math.prod(sizes) * weight if all(sizes) else 0
    scale = max(1, total // SAMPLE_POINTS) if total else 1
    draws = ({**first, **{p.key: p.sample(rng) for p in planned}} for _ in range(SAMPLE_POINTS))
    return draws, scale, total or SAMPLE_POINTS * scale, True


def scan(
    space: SearchSpace,
    ctx: SpaceContext,
    *,
    timeout_s: float = 0.0,
    stall_timeout_s: float = 0.0,
) -> Scan:
    """Classify every point: refused by a constraint, ruled out by an out-of-memory trial,
    dropped by the memory model (grouped, with its predicted GiB), dominated (more recompute
    than its micro-batch needs), or kept (grouped by class, with its floor, predicted step,
    limits and expected trial wall)."""
    combos, weight, total, sampled = _combos(space)
    units = next((p.values() or [] for p in space.searched if p.key == COMPILE_UNIT), [])
    costs = costs_for(ctx.device_name if ctx.device_type == "cuda" else "")
    out = Scan(total=total, sampled=sampled)
    dropped: dict[tuple, DroppedGroup] = {}
    classes: dict[tuple, PointClass] = {}
    seen: dict[str, set] = {p.key: set() for p in space.searched if p.kind == "categorical"}
    for params in combos:
        point = space.point(params)
        reason = check_point(point, ctx, memory=False)
        if reason is not None:
            out.refused += weight
            out.reasons[reason] += weight
            continue
        full = point.over(ctx.base)
        device_type = "cpu" if str(full.get(DEVICE, "auto")) == "cpu" else ctx.device_type
        same_device = device_type == ctx.device_type
        cheaper = None  # the cheaper recompute that makes this point dominated
        if same_device and ctx.ooms and oom_reason(full, ctx.ooms, device_type=device_type):
            out.oom_refused += weight
            continue
        if same_device and ctx.device_memory_gib is not None:
            verdict = predict(
                full,
                device_type=device_type,
                bf16_supported=ctx.bf16_supported,
                device_gib=ctx.device_memory_gib,
            )
            if not verdict.fits:
                knobs = _memory_knobs(full, ctx, device_type)
                key = tuple(knobs.values())
                group = dropped.get(key)
                points = weight + (group.points if group else 0)
                dropped[key] = DroppedGroup(knobs=knobs, peak_gib=verdict.peak_gib, points=points)
                continue
            cheaper = cheaper_recompute(full, ctx)
        for key, values in seen.items():  # it runs: its values stay in the space
            values.add(_hashable(params.get(key)))
        if cheaper is not None:  # it runs, but the search never launches it
            out.dominated[(str(full.get(RECOMPUTE)), str(cheaper))] += weight
            continue
        limits = point_limits(point, ctx, timeout_s=timeout_s, stall_timeout_s=stall_timeout_s)
        _add_to_class(classes, full, limits, weight)
        out.kept += weight
        out.wall_total_s += weight * _unit_mean_wall(full, costs, limits.expected, units)
    groups = list(dropped.values())
    for knob in (ATTENTION, COMPILE):
        groups = _merge(groups, knob)
    out.dropped = sorted(groups, key=lambda g: (-g.peak_gib, tuple(map(str, g.knobs.values()))))
    out.classes = sorted(classes.values(), key=lambda c: tuple(str(v) for v in c.knobs.values()))
    if not sampled:  # a sample may miss a value that runs: drop nothing on its word
        for p in space.searched:
            if p.key in seen and _planned(p.key):
                dead = [c for c in p.choices if _hashable(c) not in seen[p.key]]
                if dead:
                    out.dead_values[p.key] = dead
    return out


def _unit_mean_wall(
    full: dict[str, Any], costs: ProcessCosts, expected: TrialTime, units: list[Any]
) -> float:
    """A compiled point's expected wall averaged over the compile units the space searches
    (TPE's design draws them alike): its expectation at the base config's unit with the
    forecast's compile of each unit in turn, the rest of the trial the same."""
    if len(units) < 2 or expected.compile_s <= 0:
        return expected.total_s
    n_layer = int(full[N_LAYER])
    each = [trial_compile_s(full, costs, n_layer=n_layer, unit=str(unit)) for unit in units]
    return expected.total_s - expected.compile_s + statistics.fmean(each)


def _merge(groups: list[DroppedGroup], knob: str) -> list[DroppedGroup]:
    """One row for groups that differ only in `knob` and predict the same peak (the fused
    attention kernels save the same tensors; compile modes compile the same graph)."""
    merged: dict[tuple, DroppedGroup] = {}
    for g in groups:
        others = tuple((k, str(v)) for k, v in g.knobs.items() if k != knob)
        key = (others, round(g.peak_gib, 3))
        if key in merged:
            m = merged[key]
            values = f"{m.knobs[knob]},{g.knobs[knob]}"
            merged[key] = replace(m, knobs={**m.knobs, knob: values}, points=m.points + g.points)
        else:
            merged[key] = g
    return list(merged.values())


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)


def _memory_knobs(full: dict, ctx: SpaceContext, device_type: str) -> dict[str, Any]:
    knobs = {k: full.get(k) for k in MEMORY_KNOBS}
    knobs[DTYPE] = resolve_dtype_name(
        full.get(DTYPE), device_type=device_type, bf16_supported=ctx.bf16_supported
    )
    return knobs


def _add_to_class(classes: dict, full: dict, limits: TrialLimits, weight: int) -> None:
    knobs = {"precision": limits.step.dtype, **{k: full.get(k) for k in CLASS_KNOBS}}
    key = tuple(knobs.values())
    c = classes.get(key)
    if c is None:
        c = classes[key] = PointClass(
            knobs=knobs,
            floor_s=limits.step.floor_s,
            step_s=limits.step.predicted_s,
            timeout_s=limits.timeout_s,
            stall_timeout_s=limits.stall_timeout_s,
        )
    c.timeout_s = max(c.timeout_s, limits.timeout_s)
    c.step_s = max(c.step_s, limits.step.predicted_s)
    if limits.stall_timeout_s is not None and c.stall_timeout_s is not None:
        c.stall_timeout_s = max(c.stall_timeout_s, limits.stall_timeout_s)
    wall = limits.expected.total_s
    c.points += weight
    c.wall_total_s += weight * wall
    c.wall_min_s, c.wall_max_s = min(c.wall_min_s, wall), max(c.wall_max_s, wall)


def drop_dead_values(space: SearchSpace, found: Scan) -> SearchSpace:
    """The space without the choices that no runnable point has (every point with them is refused
    or predicted not to fit), so the sampler never proposes them. A key keeps at least one value."""
    params = []
    for p in space.params:
        dead = found.dead_values.get(p.key)
        if dead and len(dead) < len(p.choices):
            p = replace(p, choices=tuple(c for c in p.choices if c not in dead))
        params.append(p)
    return replace(space, params=tuple(params))
