"""The sweep's plan, from arithmetic alone: what runs, what is dropped, how long it all takes.

`python sweep.py -m ... hydra.sweeper.plan=true hydra.sweeper.plan_device="NVIDIA H100 80GB HBM3"`
prints it on any machine and starts nothing. A real sweep computes the same scan at start-up to
say how many feasible points the memory model drops, and to drop the choices no runnable point
has before the sampler sees them.

The space is scanned on the keys that the constraints, the memory model and the trial limits read
(PLAN_KEYS); every other searched key only multiplies the count, so a space of 400,000 points is
scanned in a few thousand evaluations. Pure: no torch, no I/O; functions return data and
`format_plan` returns the text.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sweeper.limits import ASSUMED_MFU, SAFETY, TrialLimits, resolve_dtype, trial_limits
from sweeper.memory import oom_reason, predict
from sweeper.report import fmt_duration
from sweeper.space import SAMPLE_POINTS, SearchSpace, SpaceContext, check_point

# Keys read by the constraints (sweeper/space.py), the memory model and the trial limits; a
# searched key outside these (and outside model.* / trial.*) never changes whether a point runs
# or how long it takes, so it is counted, not enumerated.
PLAN_KEYS = (
    "batch.micro_batch", "batch.grad_accum", "batch.tokens_per_step", "runtime.device",
    "runtime.compile", "runtime.dtype", "runtime.tf32", "runtime.attention",
    "runtime.activation_checkpointing", "data.num_workers", "checkpoint.every_steps",
)  # fmt: skip
PLAN_PREFIXES = ("model.", "trial.")
# The knobs a memory estimate depends on (train/memory_model.MemoryInputs), as printed.
MEMORY_KNOBS = (
    "batch.micro_batch", "runtime.dtype", "runtime.attention",
    "runtime.activation_checkpointing", "runtime.compile",
)  # fmt: skip
# The knobs a point's floor, predicted step and trial limits depend on most, as printed.
CLASS_KNOBS = ("runtime.compile", "runtime.activation_checkpointing")
ENUMERATE_LIMIT = 100_000  # planned combinations scanned exhaustively; beyond, sampled
SWEEP_OVERHEAD_S = 15.0  # start (imports, probe, zygote) + end (plots, report): README benchmark


@dataclass(frozen=True, kw_only=True)
class DeviceFacts:
    """What planning needs of a device, probed where trials run or taken from a plan device."""

    name: str  # as torch names it, or "cpu"
    device_type: str  # cuda | cpu
    memory_gib: float | None  # total device memory; None = no memory-model refusals
    bf16_supported: bool
    cpu_count: int  # CPUs for data workers
    source: str  # "probed" | "plan device"


def known_plan_devices() -> list[str]:
    """Device names plan_device accepts: a memory size (train/measure/memory_model.py) and a peak
    (train/measure/flops.py) are both known for them."""
    from train.measure.flops import chip_for_device_name
    from train.measure.memory_model import DEVICE_MEMORY_GIB

    return sorted(n for n in DEVICE_MEMORY_GIB if chip_for_device_name(n) is not None)


def plan_device_facts(name: str, *, cpu_count: int) -> DeviceFacts:
    """The facts of a named device, for planning without it; ValueError for an unknown name."""
    from train.measure.flops import chip_for_device_name
    from train.measure.memory_model import device_memory_gib

    memory = device_memory_gib(name)
    if memory is None or chip_for_device_name(name) is None:
        raise ValueError(
            f"hydra.sweeper.plan_device={name!r} is not a known device; use one of "
            f"{known_plan_devices()} (names as torch.cuda.get_device_name spells them)"
        )
    # every device with a known memory and peak (Ampere and newer) computes in bf16
    return DeviceFacts(
        name=name, device_type="cuda", memory_gib=memory, bf16_supported=True,
        cpu_count=cpu_count, source="plan device",
    )  # fmt: skip


def device_facts(probed: dict | None, *, plan_device: str, cpu_count: int) -> DeviceFacts:
    """The device a sweep plans for: the probed one (train/proc/probe.py), with a plan device's name
    and memory in its place when one is named; a plan device alone when nothing was probed."""
    if probed is None:
        return plan_device_facts(plan_device, cpu_count=cpu_count)
    facts = DeviceFacts(
        name=probed.get("device_name") or "cpu",
        device_type=probed["device_type"],
        memory_gib=probed.get("device_memory_gib"),
        bf16_supported=bool(probed.get("bf16_supported")),
        cpu_count=int(probed.get("cpu_count") or cpu_count),
        source="probed",
    )
    if not plan_device:
        return facts
    named = plan_device_facts(plan_device, cpu_count=facts.cpu_count)
    return replace(facts, name=named.name, memory_gib=named.memory_gib, source="plan device")


def point_limits(
    point: dict[str, Any], ctx: SpaceContext, *, timeout_s: float, stall_timeout_s: float
) -> TrialLimits:
    """The limits of the trial of `point` (a SearchSpace.point) in the sweep of `ctx`."""
    full = {**ctx.base, **point}
    device_type = "cpu" if str(full.get("runtime.device", "auto")) == "cpu" else ctx.device_type
    return trial_limits(
        full,
        device_name=ctx.device_name or device_type,
        device_type=device_type,
        bf16_supported=ctx.bf16_supported,
        timeout_s=timeout_s,
        stall_timeout_s=stall_timeout_s,
    )


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
    floor_s: float | None  # step at 100% of the datasheet peak (train/measure/flops.py)
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
    kept: int = 0  # points that run
    classes: list[PointClass] = field(default_factory=list)
    dead_values: dict[str, list[Any]] = field(default_factory=dict)  # values no kept point has
    wall_total_s: float = 0.0  # sum of expected trial walls over kept points

    @property
    def feasible(self) -> int:
        """Points the constraints accept (before the memory rules)."""
        return self.total - self.refused

    @property
    def dropped_points(self) -> int:
        return sum(g.points for g in self.dropped)

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
    dropped by the memory model (grouped, with its predicted GiB), or kept (grouped by class,
    with its floor, predicted step, limits and expected trial wall)."""
    combos, weight, total, sampled = _combos(space)
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
        full = {**ctx.base, **point}
        device_type = "cpu" if str(full.get("runtime.device", "auto")) == "cpu" else ctx.device_type
        same_device = device_type == ctx.device_type
        if same_device and ctx.ooms and oom_reason(full, ctx.ooms, device_type=device_type):
            out.oom_refused += weight
            continue
        if same_device and ctx.device_memory_gib is not None:
            verdict = predict(
                full, device_type=device_type, bf16_supported=ctx.bf16_supported,
                device_gib=ctx.device_memory_gib,
            )  # fmt: skip
            if not verdict.fits:
                knobs = _memory_knobs(full, ctx, device_type)
                key = tuple(knobs.values())
                group = dropped.get(key)
                points = weight + (group.points if group else 0)
                dropped[key] = DroppedGroup(knobs=knobs, peak_gib=verdict.peak_gib, points=points)
                continue
        limits = point_limits(point, ctx, timeout_s=timeout_s, stall_timeout_s=stall_timeout_s)
        _add_to_class(classes, full, limits, weight)
        out.kept += weight
        out.wall_total_s += weight * limits.expected.total_s
        for key, values in seen.items():
            values.add(_hashable(params.get(key)))
    groups = list(dropped.values())
    for knob in ("runtime.attention", "runtime.compile"):
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
    knobs["runtime.dtype"] = resolve_dtype(
        full.get("runtime.dtype"), device_type=device_type, bf16_supported=ctx.bf16_supported
    )
    return knobs


def _add_to_class(classes: dict, full: dict, limits: TrialLimits, weight: int) -> None:
    knobs = {"precision": limits.step.dtype, **{k: full.get(k) for k in CLASS_KNOBS}}
    key = tuple(knobs.values())
    c = classes.get(key)
    if c is None:
        c = classes[key] = PointClass(
            knobs=knobs, floor_s=limits.step.floor_s, step_s=limits.step.predicted_s,
            timeout_s=limits.timeout_s, stall_timeout_s=limits.stall_timeout_s,
        )  # fmt: skip
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
    for key, dead in found.dead_values.items():
        lines.append(f"{key}: dropped {dead} before sampling (no runnable point has them)")
    if found.classes:
        hard = [c.timeout_s for c in found.classes]
        stall = [c.stall_timeout_s for c in found.classes if c.stall_timeout_s is not None]
        lines.append(
            f"trial limits: hard {_span(hard)}, "
            + (f"stall {_span(stall)}" if stall else "no stall check")
            + f"; expected trial {_secs(found.mean_trial_s)} on average"
        )
    return lines


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return _secs(lo) if lo == hi else f"{_secs(lo)} to {_secs(hi)}"


# ---- the whole sweep ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """Everything plan mode prints."""

    device: DeviceFacts
    model: dict[str, Any]  # name, num_params, flops_per_token, tokens_per_step, block_size
    settings: dict[str, Any]  # search_name, sampler, pruner, objective, n_trials, ...
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


def build_plan(
    *,
    space: SearchSpace,
    ctx: SpaceContext,
    device: DeviceFacts,
    settings: dict[str, Any],
    found: Scan | None = None,
) -> SweepPlan:
    """The plan of a sweep of `space` on `device` with the sweeper's `settings` (n_trials,
    sampler, verify_top_k, verify_repeats, max_wall_s, cpu_max_wall_s, trial_timeout_s,
    stall_timeout_s, and names for the report)."""
    from train.measure.flops import flops_per_token, gpt2_num_params
    from train.measure.memory_model import ALLOCATOR_MARGIN

    if found is None:
        found = scan(
            space, ctx, timeout_s=float(settings.get("trial_timeout_s") or 0),
            stall_timeout_s=float(settings.get("stall_timeout_s") or 0),
        )  # fmt: skip
    b = ctx.base
    n_params = gpt2_num_params(
        n_layer=b["model.n_layer"], n_embd=b["model.n_embd"], vocab_size=b["model.vocab_size"],
        block_size=b["model.block_size"], bias=bool(b.get("model.bias", True)),
    )  # fmt: skip
    model = {
        "name": b.get("model.name"),
        "num_params": n_params,
        "flops_per_token": flops_per_token(
            n_layer=b["model.n_layer"], n_head=b["model.n_head"], n_embd=b["model.n_embd"],
            seq_len=b["model.block_size"], vocab_size=b["model.vocab_size"], num_params=n_params,
        ),
        "tokens_per_step": ctx.tokens_per_step,
        "block_size": ctx.block_size,
    }
    n_trials = int(settings.get("n_trials") or 0)
    if settings.get("sampler") == "grid":
        n_search: int | None = min(n_trials, found.kept) if n_trials > 0 else found.kept
    else:
        n_search = n_trials if n_trials > 0 else None
    # the top k and the starting config (re-measured beside them unless it is one of them), each
    # with real full steps: a run is sized like the starting config's trial, never projected
    k, repeats = int(settings.get("verify_top_k") or 0), int(settings.get("verify_repeats") or 0)
    start, start_runs = starting_config_line(space, ctx)
    n_verify = (k + start_runs) * repeats
    verify_s = point_limits(
        {"trial.project_above_s": 0}, ctx,
        timeout_s=float(settings.get("trial_timeout_s") or 0),
        stall_timeout_s=float(settings.get("stall_timeout_s") or 0),
    ).expected.total_s  # fmt: skip
    cap = float(settings.get("max_wall_s") or 0)
    if cap <= 0 and device.device_type == "cpu":
        cap = float(settings.get("cpu_max_wall_s") or 0)
    mean = found.mean_trial_s
    wall = None
    if mean is not None and n_search is not None:
        wall = SWEEP_OVERHEAD_S + n_search * mean + n_verify * verify_s
    if cap > 0:
        wall = cap if wall is None else min(wall, cap)
    usable = device.memory_gib * (1 - ALLOCATOR_MARGIN) if device.memory_gib else None
    return SweepPlan(
        start=start,
        start_runs=start_runs,
        device=device, model=model, settings=dict(settings), space=space, scan=found,
        usable_gib=usable, n_search=n_search, n_verify=n_verify, verify_trial_s=verify_s,
        wall_s=wall,
        wall_cap_s=cap if cap > 0 else None,
    )  # fmt: skip


def starting_config_line(space: SearchSpace, ctx: SpaceContext) -> tuple[str, bool]:
    """The composed config as the sweep will treat it: its predicted memory, and whether it is
    measured first (the report's point of comparison) or not, and why; True when it runs."""
    from sweeper.memory import predict
    from sweeper.space import baseline_params, check_point

    b = ctx.base
    knobs = (f"micro_batch={b.get('batch.micro_batch')} x grad_accum={b.get('batch.grad_accum')}, "
             f"dtype={b.get('runtime.dtype')}, compile={b.get('runtime.compile')}, "
             f"activation_checkpointing={b.get('runtime.activation_checkpointing')}")
    memory = ""
    if ctx.device_memory_gib:
        v = predict(b, device_type=ctx.device_type, bf16_supported=ctx.bf16_supported,
                    device_gib=ctx.device_memory_gib)  # fmt: skip
        memory = f", predicted {v.peak_gib:.1f} GiB"
    reason = check_point({}, ctx)
    if reason is not None:
        return f"starting config ({knobs}){memory}: NOT RUN ({reason})", False
    if baseline_params(space, b, device_type=ctx.device_type, bf16=ctx.bf16_supported) is None:
        return (f"starting config ({knobs}){memory}: not run (a searched knob is set to a value "
                "outside the space), so the report has no starting point to compare with"), False
    return f"starting config ({knobs}){memory}: runs first and is verified beside the winner", True


# ---- the text -----------------------------------------------------------------------------------


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.3g} s" if s < 60 else fmt_duration(s)


def _values(p: Any) -> str:
    if p.kind == "categorical":
        text = ", ".join(str(c) for c in p.choices)
        return text + ("  (grad_accum follows)" if p.split else "")
    if p.kind == "fixed":
        return f"{p.value} (fixed)"
    step = f" step {p.step}" if p.step else ""
    return f"{p.low} .. {p.high}{step}" + (" log" if p.log else "")


def format_plan(plan: SweepPlan) -> str:
    """The plan as the lines plan mode prints."""
    d, m, s, sc = plan.device, plan.model, plan.settings, plan.scan
    lines = [f"plan: model={m['name']} on {d.name} ({d.source}), nothing is run"]
    memory = (
        f"{d.memory_gib:.4g} GiB, {plan.usable_gib:.1f} GiB usable"
        if d.memory_gib is not None and plan.usable_gib is not None
        else "memory not modelled"
    )
    lines += [
        f"  device      {memory}; {d.cpu_count} CPUs for data workers"
        + (" (this machine's)" if d.source == "plan device" else ""),
        f"  model       {m['num_params']:,} params, {m['flops_per_token']:.4g} FLOPs/token, "
        f"{m['tokens_per_step']:,} tokens/step ({m['tokens_per_step'] // m['block_size']:,} "
        f"sequences of {m['block_size']})",
        f"  search      {s.get('search_name')}: sampler {s.get('sampler')}, pruner "
        f"{s.get('pruner')}, objective {s.get('objective')}",
        f"  {plan.start}",
        "space after constraints and the memory model:",
    ]
    width = max((len(p.key) for p in plan.space.params), default=0)
    lines += [f"  {p.key:<{width}}  {_values(p)}" for p in plan.space.params]
    how = "sampled" if sc.sampled else "enumerated"
    share = f" ({100 * sc.dropped_points / sc.feasible:.0f}% of them)" if sc.feasible else ""
    lines.append(
        f"points: {sc.total:,} ({how}); constraints refuse {sc.refused:,}; "
        f"{sc.feasible:,} feasible; the memory model drops {sc.dropped_points:,}{share}"
        + (f"; out-of-memory trials rule out {sc.oom_refused:,}" if sc.oom_refused else "")
        + f"; {sc.kept:,} run"
    )
    for reason, n in sc.reasons.most_common(5):
        lines.append(f"  refused {n:,}: {reason}")
    for key, dead in sc.dead_values.items():
        lines.append(f"  {key}: {dead} dropped (no runnable point has them)")
    if sc.dropped:
        lines.append(
            f"dropped by the memory model (predicted peak > {plan.usable_gib:.1f} GiB usable on "
            f"{d.name}):"
        )
        lines.append(
            "   predicted  micro_batch  dtype  act_ckpt  points  attention / compile"
        )
        for g in sc.dropped:
            k = g.knobs
            lines.append(
                f"  {g.peak_gib:6.1f} GiB  {k['batch.micro_batch']!s:>11}  "
                f"{k['runtime.dtype']!s:<5}  {k['runtime.activation_checkpointing']!s:<8}  "
                f"{g.points:>6,}  {k['runtime.attention']} / {k['runtime.compile']}"
            )
    lines.append(
        f"per point class (tf32: fp32 with runtime.tf32=true): floor = step at 100% of the "
        f"datasheet peak; step = at {ASSUMED_MFU:.0%} MFU; limits = {SAFETY:g}x the predicted trial"
        " (never below 600 s / 300 s)"
    )
    lines.append(
        "  precision  compile                     act_ckpt  points     floor      step"
        "  hard limit     stall  trial wall (min-max)"
    )
    for c in sc.classes:
        k = c.knobs
        lines.append(
            f"  {k['precision']!s:<9}  {k['runtime.compile']!s:<26}  "
            f"{k['runtime.activation_checkpointing']!s:<8}  {c.points:>6,}  "
            f"{_secs(c.floor_s):>8}  {_secs(c.step_s):>8}  {_secs(c.timeout_s):>10}  "
            f"{_secs(c.stall_timeout_s) if c.stall_timeout_s else 'off':>8}  "
            f"{_secs(c.wall_mean_s)} ({_secs(c.wall_min_s)}-{_secs(c.wall_max_s)})"
        )
    mean = sc.mean_trial_s
    search = "no trial limit" if plan.n_search is None else f"{plan.n_search} search"
    lines.append(
        f"trials: {search} of {_secs(mean)} on average (set-up and compile included) + "
        f"{plan.n_verify} verification runs ((top {s.get('verify_top_k')}"
        f"{' + the starting config' if plan.start_runs else ''}) x {s.get('verify_repeats')}) of "
        f"~{_secs(plan.verify_trial_s)} (real full steps)"
    )
    if plan.wall_s is None:
        lines.append("predicted sweep wall: unknown (no runnable point, or no trial limit)")
    else:
        detail = (
            f"{plan.n_search or 0} x {_secs(mean)} + {plan.n_verify} x "
            f"{_secs(plan.verify_trial_s)} + {SWEEP_OVERHEAD_S:.0f} s start and end"
        )
        if plan.wall_cap_s is not None and plan.wall_s >= plan.wall_cap_s:
            detail += f"; capped by the {_secs(plan.wall_cap_s)} wall budget"
        lines.append(f"predicted sweep wall: {_secs(plan.wall_s)} ({detail})")
    return "\n".join(lines)
