"""The numerics guard in plan mode: whether it runs, and what its curve runs cost.

The guard (sweeper/verify/guard.py) trains the starting config from guard.seeds seeds, in one
process, and each race entrant that changes a math-changing key (sweeper/space/math_keys.py)
once, each curve guard.steps full optimizer steps. At most the top k change the math, so the
plan prices one process for the seeds + verify.top_k runs, sized like the starting config's
trial with the curve's steps (sweeper/space/limits.py); where the starting config does not fit
the device, like the nearest point with its math that does (sweeper/space/fit.py), which the
guard runs instead. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.plan.wall import graph_of
from sweeper.settings import GuardConf, SweepSettings
from sweeper.space.constraints import SpaceContext
from sweeper.space.fit import Fit, nearest_fit
from sweeper.space.limits import point_forecast
from sweeper.space.math_keys import math_changes, searched_math_keys
from sweeper.space.point import Point
from train.core.curve import capped_split, curve_keys
from train.core.keys import GRAD_ACCUM, MICRO_BATCH, NPROC, TOKENS_PER_STEP


def curve_run_keys(
    point: Mapping[str, Any], ctx: SpaceContext, rules: GuardConf, *, seed: int, seeds: int = 1
) -> dict[str, Any]:
    """The trainer keys of one curve run of `point`: the curve's steps, its seed (and `seeds`
    curves from it in one process), and a step of at most guard.tokens tokens (fewer
    micro-batches, the same micro-batch)."""
    micro = point.get(MICRO_BATCH, ctx.base.get(MICRO_BATCH))
    split = capped_split(
        tokens_per_step=ctx.tokens_per_step,
        micro_batch=int(micro or 1),
        block_size=ctx.block_size,
        world_size=ctx.world_size,
        max_tokens=rules.tokens,
    )
    return {**curve_keys(steps=rules.steps, seed=seed, seeds=seeds), **split}


@dataclass(frozen=True, kw_only=True)
class GuardMode:
    """Whether the guard runs for a sweep, and what decided it: guard.mode on or off, or (auto)
    the math-changing keys the space searches (none: off). Its words: sweeper/verify/guard_text.py
    mode_text."""

    on: bool
    setting: str  # guard.mode: on | off | auto
    keys: tuple[str, ...] = ()  # the searched math-changing keys that turned auto on


def guard_mode(rules: GuardConf, searched: dict[str, list[Any] | None]) -> GuardMode:
    """Whether the guard runs for a space searching `searched` ({key: values, None for a range})."""
    if rules.mode in ("on", "off"):
        return GuardMode(on=rules.mode == "on", setting=rules.mode)
    keys = tuple(searched_math_keys(searched))
    return GuardMode(on=bool(keys), setting="auto", keys=keys)


# keys pinned to the reference's values in a contender's curve run: they choose the batches
SAME_BATCHES = (MICRO_BATCH, GRAD_ACCUM, NPROC)


@dataclass(frozen=True, kw_only=True)
class GuardPlan:
    """The guard's curve runs and their price, as plan mode's text (sweeper/report/plan_text.py)
    says them."""

    on: bool  # whether curve runs are priced
    mode: GuardMode  # what the setting and the space decided (on, yet none planned may change math)
    runs: int  # curve processes at most: the reference's (every seed) and one per contender
    run_s: float  # a curve process's predicted wall, seconds (the mean where they differ)
    # on by its mode, yet none of this many planned trials changes the math: no curve runs
    planned_without_math: int | None = None
    # the price's parts, where it runs: the reference's seeds in one process of reference_s, the
    # contenders
    # (counted from the planned points, or the top k), steps x step_tokens per run, all_s in all
    seeds: int = 0
    reference_s: float = 0.0
    contenders: int = 0
    contenders_planned: bool = False
    steps: int = 0
    step_tokens: int = 0
    all_s: float = 0.0
    refit: Fit | None = None  # the reference's point where the starting config does not fit
    k: float = 0.0  # the tolerance: k x the seed-to-seed spread, at least `floor` nats
    floor: float = 0.0

    @property
    def total_s(self) -> float:
        return self.runs * self.run_s if self.on else 0.0


def guard_plan(
    searched: dict[str, list[Any] | None],
    ctx: SpaceContext,
    settings: SweepSettings,
    *,
    planned: list[Point] | None = None,
) -> GuardPlan:
    """The guard's runs for this sweep, priced at the starting config's predicted step.
    `planned`: every point the search will run, where the plan knows them all (the starting
    config and the prior's first points fill the trial budget); none changing the math, as the
    guard compares them (sweeper/verify/guard.py), means the guard runs nothing."""
    rules = settings.guard
    mode = guard_mode(rules, searched)
    if not mode.on:
        return GuardPlan(on=False, mode=mode, runs=0, run_s=0.0)
    fit = nearest_fit({}, ctx)  # the starting config, or the nearest point with its math that fits
    reference = fit.point if fit is not None else Point()
    if planned is not None and not any(
        math_changes(reference.over(ctx.base), p.over(ctx.base), device_type=ctx.device_type)
        for p in planned
    ):
        return GuardPlan(on=False, mode=mode, runs=0, run_s=0.0, planned_without_math=len(planned))
    keys = curve_run_keys(reference, ctx, rules, seed=0)
    # a graph the search compiled loads from the compile cache (sweeper/forecast/costs.py)
    seen = {graph_of(p.over(ctx.base)) for p in planned or []}

    def curve_s(point: Point, run_keys: dict[str, Any] = keys) -> float:
        warm = graph_of(point.over(ctx.base)) in seen
        return point_forecast(point.with_knobs(run_keys), ctx, warm=warm).total_s

    # the reference's seeds, all in one process (train/trial/seeds.py)
    ref_s = curve_s(reference, curve_run_keys(reference, ctx, rules, seed=0, seeds=rules.seeds))
    batches = {k: reference[k] for k in SAME_BATCHES if k in reference}
    changing = [
        p.with_knobs(batches)
        for p in planned or []
        if math_changes(reference.over(ctx.base), p.over(ctx.base), device_type=ctx.device_type)
    ][: settings.verify.top_k]
    if planned is not None:  # each planned contender at its own price (float8 compiles its own)
        contenders = len(changing)
        total = ref_s + sum(curve_s(p) for p in changing)
    else:  # the top k, each priced like the reference's first seed
        contenders = settings.verify.top_k
        total = ref_s + contenders * curve_s(reference)
    runs = 1 + contenders
    return GuardPlan(
        on=True,
        mode=mode,
        runs=runs,
        run_s=total / max(1, runs),
        seeds=rules.seeds,
        reference_s=ref_s,
        contenders=contenders,
        contenders_planned=planned is not None,
        steps=rules.steps,
        step_tokens=_step_tokens(keys, ctx),
        all_s=total,
        refit=fit if fit is not None and fit.changed else None,
        k=rules.k,
        floor=rules.floor,
    )


def _step_tokens(keys: dict[str, Any], ctx: SpaceContext) -> int:
    return int(keys.get(TOKENS_PER_STEP, ctx.tokens_per_step))
