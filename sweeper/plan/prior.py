"""Where the arithmetic points: the first points a sweep measures, each with its reason.

TPE starts from a Latin-hypercube design (sweeper/search/design.py): well spread, and blind. The
memory model and the FLOP arithmetic already say which points are likely near the top of a
compute-bound GPU step, so those are queued first (after the starting config):

1. the largest micro-batch that fits without recompute (fewest, largest matmuls; no forward runs
   twice), in bf16 (the datasheet's bf16 peak is twice TF32's), compiled (fused elementwise
   kernels: gpt2-xl on an H100 ran 14% faster compiled, README), block by block where the
   regions' host work hides behind the kernels (sweeper/plan/unit_choice.py: a cold compile of a
   few layers' cost), with a fused attention kernel (flash, then cuDNN, then memory-efficient:
   none stores the T x T score matrix);
2. the same one micro-batch size up with the cheapest recompute that lets it fit (the least extra
   forward work by train.core.config.num_checkpointed_blocks);
3. point 1 with each new lever of the compute-bound step the space holds (float8 matmuls, the
   chunked loss, a newer flash implementation, selective recompute): one point per lever, the
   micro-batch re-fitted when the lever frees memory.

On a CPU none of that arithmetic holds (no datasheet peak, bf16 slower than fp32 without AMX,
compile costing more than a short trial gains), so the prior sets only what is true there: every
core to the step's threads, and no DataLoader worker competing with the step when there are two
cores or fewer (the README's grid measured workers=1 at par or slower on this 2-core CPU). Pure:
no torch, no I/O; the points are checked by the space's own rules (constraints + memory model).
Each point carries the rule that picked it and its numbers; sweeper/report/prior_text.py says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sweeper.plan.unit_choice import first_unit
from sweeper.space.constraints import SpaceContext
from sweeper.space.fit import Fit
from sweeper.space.limits import forecast_point, predict_step, recompute_factor
from sweeper.space.point import Point
from sweeper.space.search_space import SearchSpace
from train.core.keys import (
    ATTENTION,
    CHECKPOINT_MODE,
    COMPILE,
    COMPILE_UNIT,
    DTYPE,
    FLOAT8,
    GRAD_ACCUM,
    LOSS,
    MICRO_BATCH,
    N_LAYER,
    PIN_MEMORY,
    RECOMPUTE,
    THREADS,
    WORKERS,
)

# Which rule picked a point: the module docstring's 1 (largest_fit), 2 (size_up) and 3 (lever), or
# the CPU's threads and workers (cpu).
PointRule = Literal["largest_fit", "size_up", "lever", "cpu"]
# What the prior is here: off by the setting or by a sampler other than TPE, nothing searched,
# nothing fits without recompute, or the GPU's arithmetic or the CPU's (either may find no point).
PriorKind = Literal["off", "not_tpe", "nothing_searched", "no_fit", "gpu", "cpu"]

# the samplers that measure the prior's points first: TPE (then its own), and `prior` (nothing else)
PRIOR_SAMPLERS = ("tpe", "prior")
FUSED_ATTENTION = ("flash", "cudnn", "efficient")  # in order of preference, for bf16 on CUDA
# New levers of the compute-bound step, as (key, values to try in order): present only when the
# space searches them; each becomes one point beside point 1.
LEVERS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    (FLOAT8, ("tensorwise", "rowwise")),
    (LOSS, ("chunked",)),
    (ATTENTION, ("fa3", "fa4")),  # FA3 is Hopper's kernel; FA4 first from Blackwell on
)
CPU_FEW_CORES = 2  # at or below this many cores a DataLoader worker takes a core from the step


@dataclass(frozen=True, kw_only=True)
class PriorPoint:
    """One point the arithmetic picks, the rule that picked it and the numbers it went by."""

    # the knobs it sets, with its fit (it fits as it is) and its forecast (a cold compile)
    point: Point
    params: dict[str, Any]  # searched key -> value (a SearchSpace params dict)
    rule: PointRule
    knobs: dict[str, Any] = field(default_factory=dict)  # largest_fit, cpu: the knobs it set
    compute: float = 1.0  # size_up: the compute of its recompute, times the step's without
    lever: tuple[str, Any] | None = None  # lever: the key and the value it adds
    refit: bool = False  # lever: it frees memory, so a larger micro-batch fits without recompute
    cores: int = 0  # cpu: the cores here


@dataclass(frozen=True, kw_only=True)
class Prior:
    """The prior's points, and what it is on this device (or why it is off)."""

    points: list[PriorPoint]
    kind: PriorKind


def prior_sampler_trials(
    space: SearchSpace, ctx: SpaceContext, *, start: dict | None, enabled: bool, n_trials: int
) -> int:
    """The prior sampler's trial count: the starting config (`start`, where it runs) and the
    prior's points, at most `n_trials` where that is set. ValueError where there is none (its
    n_trials would be 0, no limit: a random search nobody asked for)."""
    count = (start is not None) + len(prior_points(space, ctx, start=start, enabled=enabled).points)
    if count == 0:
        raise ValueError(
            "hydra.sweeper.sampler=prior has no point to measure: the starting config is not in "
            f"the space (or does not fit) and the prior has none (hydra.sweeper.prior="
            f"{str(enabled).lower()}); use sampler=tpe, or a starting config the space holds"
        )
    return min(n_trials, count) if n_trials > 0 else count


def prior_points(
    space: SearchSpace, ctx: SpaceContext, *, start: dict | None = None, enabled: bool = True
) -> Prior:
    """The prior of `space` on the device of `ctx`; `start` (the starting config's params, if it
    runs) is never repeated."""
    if not enabled:
        return Prior(points=[], kind="off")
    searched = {p.key: p for p in space.searched}
    if not searched:
        return Prior(points=[], kind="nothing_searched")
    pick = _Picker(space, ctx, start)
    if ctx.device_type == "cpu":
        return _cpu_prior(pick, ctx)
    return _gpu_prior(pick, ctx)


class _Picker:
    """A searched-params template (the starting config's values where the space has them, else
    each key's first value) and the space's own check."""

    def __init__(self, space: SearchSpace, ctx: SpaceContext, start: dict | None) -> None:
        self.space, self.ctx, self.start = space, ctx, start
        self.params = {p.key: p for p in space.searched}
        self.template = {}
        for p in space.searched:
            value = (start or {}).get(p.key, ctx.base.get(p.key))
            choices = p.values()
            if choices is not None and value not in choices:
                value = choices[0]
            elif choices is None and value is None:
                value = p.low
            self.template[p.key] = value
        self.seen: list[dict] = [start] if start else []

    def choices(self, key: str) -> list[Any]:
        p = self.params.get(key)
        return list(p.values() or []) if p is not None else []

    def ok(self, params: dict) -> bool:
        return self.space.check(params) is None

    def first(self, params: dict, key: str, prefer: tuple | list) -> dict:
        """`params` with `key` at the first preferred value the space has and with which some
        micro-batch passes the space's rules (memory model included); else unchanged."""
        for value in prefer:
            if value in self.choices(key) and self.largest_fit({**params, key: value}):
                return {**params, key: value}
        return params

    def largest_fit(self, params: dict) -> dict | None:
        """`params` at the largest micro-batch the space accepts (memory model included)."""
        for mb in sorted(self.choices(MICRO_BATCH), reverse=True):
            trial = {**params, MICRO_BATCH: mb}
            if self.ok(trial):
                return trial
        return params if MICRO_BATCH not in self.params and self.ok(params) else None

    def add(self, out: list[PriorPoint], params: dict | None, rule: PointRule, **why: Any) -> None:
        """`params` picked by `rule` (with `why`, its numbers), unless refused or seen."""
        if params is None or not self.ok(params) or params in self.seen:
            return
        self.seen.append(params)
        point = self.space.point(params)
        point = forecast_point(point.with_fit(Fit(point=point, changed={})), self.ctx)
        out.append(PriorPoint(point=point, params=params, rule=rule, **why))


def _gpu_prior(pick: _Picker, ctx: SpaceContext) -> Prior:
    """Points 1-3 of the module docstring."""
    p = dict(pick.template)
    p = pick.first(p, DTYPE, ["bf16"] if ctx.bf16_supported else [])
    p = pick.first(p, COMPILE, ["default"])
    p = pick.first(p, ATTENTION, FUSED_ATTENTION)
    p = pick.first(p, RECOMPUTE, ["none"])
    p = pick.first(p, PIN_MEMORY, [True])  # host batches copied without a staging copy
    p = pick.first(p, WORKERS, [1])  # batches made beside the step, not inside it
    p = pick.first(p, CHECKPOINT_MODE, ["async"])  # the step stalls for a host snapshot only
    out: list[PriorPoint] = []
    best = pick.largest_fit(p)
    if best is None:
        return Prior(points=[], kind="no_fit")
    best = _with_unit(pick, best, ctx)
    pick.add(out, best, "largest_fit", knobs=best)
    up = _one_size_up(pick, best)
    if up is not None:
        pick.add(out, up, "size_up", compute=recompute_factor(up[RECOMPUTE], _layers(ctx)))
    newer = (getattr(ctx, "cuda_capability", None) or (0, 0))[0] >= 10
    for key, values in LEVERS:
        for value in values[::-1] if newer and key == ATTENTION else values:
            if value in pick.choices(key):
                lever = pick.largest_fit({**best, key: value})
                refit = lever is not None and lever.get(MICRO_BATCH) != best.get(MICRO_BATCH)
                pick.add(out, lever, "lever", lever=(key, value), refit=refit)
                break
    return Prior(points=out, kind="gpu")


def _with_unit(pick: _Picker, params: dict, ctx: SpaceContext) -> dict:
    """`params`, compiled, with the compile unit sweeper/plan/unit_choice.py tries first for its
    predicted micro-batch (where the space searches the unit)."""
    if str(params.get(COMPILE) or "none") == "none" or not pick.choices(COMPILE_UNIT):
        return params
    full = pick.space.point(params).over(ctx.base)
    step = predict_step(
        full,
        device_name=ctx.device_name,
        device_type=ctx.device_type,
        bf16_supported=ctx.bf16_supported,
    )
    micro_step_s = step.predicted_s / max(1, int(full.get(GRAD_ACCUM) or 1))
    unit = first_unit(device_type=ctx.device_type, n_layer=_layers(ctx), micro_step_s=micro_step_s)
    return pick.first(params, COMPILE_UNIT, [unit])


def _one_size_up(pick: _Picker, best: dict) -> dict | None:
    """The next larger micro-batch with the recompute that costs least and fits."""
    sizes = sorted(mb for mb in pick.choices(MICRO_BATCH) if mb > best.get(MICRO_BATCH, 0))
    if not sizes:
        return None
    layers = _layers(pick.space.ctx)
    modes = sorted(
        (m for m in pick.choices(RECOMPUTE) if m != "none"),
        key=lambda m: recompute_factor(m, layers),
    )
    for mode in modes:
        trial = {**best, MICRO_BATCH: sizes[0], RECOMPUTE: mode}
        if pick.ok(trial):
            return trial
    return None


def _cpu_prior(pick: _Picker, ctx: SpaceContext) -> Prior:
    """Threads and workers: the only arithmetic that holds on a CPU (the module docstring)."""
    p = dict(pick.template)
    p = pick.first(p, THREADS, [ctx.cpu_count])
    p = pick.first(p, WORKERS, [0] if ctx.cpu_count <= CPU_FEW_CORES else [1])
    out: list[PriorPoint] = []
    changed = {k: v for k, v in p.items() if pick.template.get(k) != v or pick.start is None}
    changed = {k: v for k, v in changed.items() if k in (THREADS, WORKERS)}
    if changed:
        pick.add(out, p, "cpu", knobs=changed, cores=ctx.cpu_count)
    return Prior(points=out, kind="cpu")


def _layers(ctx: SpaceContext) -> int:
    return int(ctx.base.get(N_LAYER, 12))
