"""The sweep's plan, from arithmetic alone: what runs, what is dropped, how long it all takes.

    python sweep.py -m ... hydra.sweeper.plan.enabled=true \
        hydra.sweeper.plan.device="NVIDIA H100 80GB HBM3"

prints it on any machine and starts nothing. The device is sweeper/plan/plan_device.py's, the scan
of the space sweeper/plan/scan.py's; this module adds the trial counts and the wall time (the text
plan mode prints is sweeper/report/plan_text.py's). Pure: no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sweeper.numbers import fmt_secs
from sweeper.plan.calibration import Calibration
from sweeper.plan.guard_price import GuardPlan, guard_plan
from sweeper.plan.plan_device import DeviceFacts
from sweeper.plan.price_sources import PriceSource, price_sources
from sweeper.plan.prior import PRIOR_SAMPLERS, Prior, prior_points
from sweeper.plan.scan import Scan, scan
from sweeper.plan.wall import SWEEP_OVERHEAD_S, WallModel, budgeted, queued_points, wall_model
from sweeper.settings import SweepSettings
from sweeper.space.constraints import SpaceContext, check_point
from sweeper.space.limits import forecast_point, race_run_forecast
from sweeper.space.memory import predict
from sweeper.space.point import Point
from sweeper.space.search_space import SearchSpace, baseline_params
from sweeper.study.optuna_study import LISTED_SAMPLERS
from train.core.flops import flops_per_token, gpt2_num_params
from train.core.keys import (
    BIAS,
    BLOCK_SIZE,
    COMPILE,
    DTYPE,
    GRAD_ACCUM,
    MICRO_BATCH,
    MODEL_NAME,
    N_EMBD,
    N_HEAD,
    N_LAYER,
    RECOMPUTE,
    TRIAL_TARGET_CI,
    VOCAB_SIZE,
)
from train.core.memory_model import ALLOCATOR_MARGIN

__all__ = ["SWEEP_OVERHEAD_S", "SweepPlan", "build_plan", "startup_lines"]


def startup_lines(found: Scan, ctx: SpaceContext) -> list[str]:
    """What a sweep logs at start-up about its scan: the memory model's drops, the choices
    dropped before sampling, and the range of trial limits."""
    lines = []
    if ctx.device_memory_gib is not None:
        share = 100 * found.dropped_points / found.feasible if found.feasible else 0.0
        worst = f", up to {found.dropped[0].peak_gib:.1f} GiB" if found.dropped else ""
        lines.append(
            f"memory model ({ctx.device_name}, {ctx.device_memory_gib:.4g} GiB): drops "
            f"{found.dropped_points:,} of the {found.feasible:,} feasible points ({share:.0f}%"
            f"{worst}), predicted not to fit; none of them is launched"
        )
    if found.dominated:
        fit = found.kept + found.dominated_points
        share = 100 * found.dominated_points / fit if fit else 0.0
        pairs = ", ".join(
            f"{mine} where {cheaper} fits ({n:,})"
            for (mine, cheaper), n in sorted(found.dominated.items(), key=lambda kv: -kv[1])
        )
        lines.append(
            f"dominated: {found.dominated_points:,} of the {fit:,} points that fit ({share:.0f}%) "
            f"recompute more than their micro-batch needs, slower at the same micro-batch than a "
            f"cheaper runtime.activation_checkpointing that fits; none of them is launched: {pairs}"
        )
    for key, dead in found.dead_values.items():
        lines.append(f"{key}: dropped {dead} before sampling (no runnable point has them)")
    if found.classes:
        hard = [c.timeout_s for c in found.classes]
        stall = [c.stall_timeout_s for c in found.classes if c.stall_timeout_s is not None]
        lines.append(
            f"trial limits: hard {_span(hard)}, "
            + (f"stall {_span(stall)}" if stall else "no stall check")
            + f"; expected trial {fmt_secs(found.mean_trial_s)} on average"
        )
    return lines


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return fmt_secs(lo) if lo == hi else f"{fmt_secs(lo)} to {fmt_secs(hi)}"


# ---- the whole sweep ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """Everything plan mode prints."""

    device: DeviceFacts
    model: dict[str, Any]  # name, num_params, flops_per_token, tokens_per_step, block_size
    settings: SweepSettings  # search_name, sampler, pruner, objective, n_trials, ...
    space: SearchSpace  # after constraints, dropped choices and dead values
    scan: Scan
    usable_gib: float | None  # device memory less the allocator margin
    n_search: int | None  # search trials (None: no trial limit, the wall budget ends it)
    n_verify: int  # verification runs
    verify_trial_s: float  # one verification run: the starting config's trial, real full steps
    start: str  # what becomes of the composed (starting) config: measured first, or why not
    start_runs: bool  # whether it runs (and is verified beside the finalists)
    wall_s: float | None  # predicted sweep wall time
    wall_cap_s: float | None  # the wall budget that caps it, if any
    prior: Prior | None = None  # the points queued before TPE's design, each with its reason
    wall: WallModel | None = None  # the predicted wall, component by component
    budget_line: str = ""  # what fits under a wall budget (sweeper/plan/wall.py budgeted)
    guard: GuardPlan | None = None  # the numerics guard's curve runs (sweeper/plan/guard_price.py)
    # where each figure that prices it comes from (sweeper/plan/price_sources.py): GPU plans only
    sources: list[PriceSource] = field(default_factory=list)


def build_plan(
    *,
    space: SearchSpace,
    ctx: SpaceContext,
    device: DeviceFacts,
    settings: SweepSettings,
    found: Scan | None = None,
    calibration: Calibration | None = None,
) -> SweepPlan:
    """The plan of a sweep of `space` on `device` with the sweeper's `settings` (n_trials,
    sampler, verify.top_k, verify.repeats, budget.max_wall_s, cpu_max_wall_s, trial_timeout_s,
    stall_timeout_s, and names for the report)."""
    if found is None:
        found = scan(
            space,
            ctx,
            timeout_s=settings.budget.trial_timeout_s,
            stall_timeout_s=settings.budget.stall_timeout_s,
        )
    # the top k and the starting config (re-measured beside them unless it is one of them), each
    # with real full steps: a run is sized like the starting config's trial, never projected
    k, repeats = settings.verify.top_k, settings.verify.repeats
    start, start_runs = starting_config_line(space, ctx)
    n_verify = (k + start_runs) * repeats
    cap = _wall_cap_s(settings, device)
    start_params = (
        baseline_params(space, ctx.base, device_type=ctx.device_type, bf16=ctx.bf16_supported)
        if start_runs
        else None
    )
    prior = prior_points(space, ctx, start=start_params, enabled=settings.prior)
    n_search = _search_trials(settings, found, queued=start_runs + len(prior.points))
    # the starting config's point with its forecast, priced beside the prior's
    start_point = None if start_params is None else forecast_point(space.point(start_params), ctx)
    walls = _sweep_wall(
        ctx,
        settings,
        prior=prior,
        start=start_point,
        n_search=n_search,
        mean_trial_s=found.mean_trial_s,
        race_entrants=k + start_runs,
        calibration=calibration,
    )
    if walls is not None and walls.race:
        verify_s = walls.race[0].each_s
    else:
        verify_s = race_run_forecast(Point(), ctx).total_s
    guard = _guard_runs(space, ctx, settings, prior=prior, start=start_point, n_search=n_search)
    wall, budget_line = _capped_wall(
        walls, guard, settings, cap_s=cap, calibration=calibration, race_entrants=k + start_runs
    )
    usable = device.memory_gib * (1 - ALLOCATOR_MARGIN) if device.memory_gib else None
    return SweepPlan(
        start=start,
        start_runs=start_runs,
        device=device,
        model=_model_facts(ctx),
        settings=settings,
        space=space,
        scan=found,
        usable_gib=usable,
        n_search=n_search,
        n_verify=n_verify,
        verify_trial_s=verify_s,
        wall_s=wall,
        wall_cap_s=cap if cap > 0 else None,
        prior=prior,
        wall=walls,
        guard=guard,
        budget_line=budget_line,
        sources=price_sources(
            device_name=ctx.device_name, device_type=ctx.device_type, n_layer=int(ctx.base[N_LAYER])
        ),
    )


def _search_trials(settings: SweepSettings, found: Scan, *, queued: int) -> int | None:
    """How many search trials run: a grid runs at most every kept point, the prior sampler the
    `queued` points (the starting config and the prior's); None where no trial limit is set and
    the wall budget ends the search."""
    n_trials = settings.n_trials
    if settings.sampler in LISTED_SAMPLERS:
        count = found.kept if settings.sampler == "grid" else queued
        return min(n_trials, count) if n_trials > 0 else count
    return n_trials if n_trials > 0 else None


def _wall_cap_s(settings: SweepSettings, device: DeviceFacts) -> float:
    """The wall budget (0: none); a CPU sweep falls back to its own cap."""
    cap = settings.budget.max_wall_s
    if cap <= 0 and device.device_type == "cpu":
        cap = settings.budget.cpu_max_wall_s
    return cap


def _sweep_wall(
    ctx: SpaceContext,
    settings: SweepSettings,
    *,
    prior: Prior,
    start: Point | None,
    n_search: int | None,
    mean_trial_s: float | None,
    race_entrants: int,
    calibration: Calibration | None,
) -> WallModel | None:
    """The predicted wall, component by component; None where the scan has no mean trial or
    the wall budget, not a trial count, ends the search."""
    if mean_trial_s is None or n_search is None:
        return None
    return wall_model(
        ctx=ctx,
        prior=prior if settings.sampler in PRIOR_SAMPLERS else _no_prior(),
        start=start,
        n_search=n_search,
        mean_trial_s=mean_trial_s,
        race_entrants=race_entrants,
        race_rounds=settings.verify.repeats,
        cached=str(getattr(settings, "compile_cache", "off")) != "off",
        calibration=calibration,
    )


def _guard_runs(
    space: SearchSpace,
    ctx: SpaceContext,
    settings: SweepSettings,
    *,
    prior: Prior,
    start: Point | None,
    n_search: int | None,
) -> GuardPlan:
    """The numerics guard's curve runs over the searched choices, priced per planned point where
    the plan knows every point the search runs."""
    return guard_plan(
        {p.key: p.values() for p in space.searched},
        ctx,
        settings,
        planned=_planned_points(
            prior if settings.sampler in PRIOR_SAMPLERS else None, start, n_search
        ),
    )


def _capped_wall(
    walls: WallModel | None,
    guard: GuardPlan,
    settings: SweepSettings,
    *,
    cap_s: float,
    calibration: Calibration | None,
    race_entrants: int,
) -> tuple[float | None, str]:
    """The predicted wall (the wall model plus the guard's curve runs, before the race) under
    the wall budget's own rules, and the line saying what fits under it."""
    if walls is None:
        return (cap_s if cap_s > 0 else None), ""
    wall = walls.total_s + guard.total_s
    if cap_s <= 0:
        return wall, ""
    guard_s = calibration.guard_s if calibration else guard.total_s
    return budgeted(
        walls,
        cap_s=cap_s,
        guard_s=guard_s,
        top_k=settings.verify.top_k,
        race_entrants=race_entrants,
        repeats=settings.verify.repeats,
    )


def _model_facts(ctx: SpaceContext) -> dict[str, Any]:
    """The model the plan prints: its name, parameters, FLOPs per token, tokens per step, block
    size and the trial's precision target."""
    b = ctx.base
    n_params = gpt2_num_params(
        n_layer=b[N_LAYER],
        n_embd=b[N_EMBD],
        vocab_size=b[VOCAB_SIZE],
        block_size=b[BLOCK_SIZE],
        bias=bool(b.get(BIAS, True)),
    )
    return {
        "name": b.get(MODEL_NAME),
        "num_params": n_params,
        "flops_per_token": flops_per_token(
            n_layer=b[N_LAYER],
            n_head=b[N_HEAD],
            n_embd=b[N_EMBD],
            seq_len=b[BLOCK_SIZE],
            vocab_size=b[VOCAB_SIZE],
            num_params=n_params,
        ),
        "tokens_per_step": ctx.tokens_per_step,
        "block_size": ctx.block_size,
        "target_ci": float(b.get(TRIAL_TARGET_CI) or 0.0),
    }


def _planned_points(
    prior: Prior | None, start: Point | None, n_search: int | None
) -> list[Point] | None:
    """Every point the search runs, where the starting config and the prior's first points fill
    its trial budget (so no TPE point is drawn); None where the plan cannot know them."""
    if prior is None or n_search is None:
        return None
    first = queued_points(prior, start)
    if n_search > len(first):
        return None
    return [point for _, point in first[:n_search]]


def _no_prior() -> Prior:
    return Prior(points=[], kind="not_tpe")


def starting_config_line(space: SearchSpace, ctx: SpaceContext) -> tuple[str, bool]:
    """The composed config as the sweep will treat it: its predicted memory, and whether it is
    measured first (the report's point of comparison) or not, and why; True when it runs."""
    b = ctx.base
    knobs = (
        f"micro_batch={b.get(MICRO_BATCH)} x grad_accum={b.get(GRAD_ACCUM)}, "
        f"dtype={b.get(DTYPE)}, compile={b.get(COMPILE)}, "
        f"activation_checkpointing={b.get(RECOMPUTE)}"
    )
    memory = ""
    if ctx.device_memory_gib:
        v = predict(
            b,
            device_type=ctx.device_type,
            bf16_supported=ctx.bf16_supported,
            device_gib=ctx.device_memory_gib,
        )
        memory = f", predicted {v.peak_gib:.1f} GiB"
    # the point the sweep queues first (its searched keys; a split's grad_accum follows them)
    params = baseline_params(space, b, device_type=ctx.device_type, bf16=ctx.bf16_supported)
    reason = check_point(params or {}, ctx)
    if reason is not None:
        return f"starting config ({knobs}){memory}: NOT RUN ({reason})", False
    if params is None:
        return (
            f"starting config ({knobs}){memory}: not run (a searched knob is set to a value "
            "outside the space), so the report has no starting point to compare with"
        ), False
    return f"starting config ({knobs}){memory}: runs first and is verified beside the winner", True
