"""The sweep's plan, from arithmetic alone: what runs, what is dropped, how long it all takes.

`python sweep.py -m ... hydra.sweeper.plan=true hydra.sweeper.plan_device="NVIDIA H100 80GB HBM3"`
prints it on any machine and starts nothing. The device is sweeper/devices.py's, the scan of the
space sweeper/scan.py's; this module adds the trial counts and the wall time, and the text. Pure:
no torch, no I/O; functions return data and `format_plan` returns the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sweeper.constraints import SpaceContext, check_point
from sweeper.devices import DeviceFacts
from sweeper.limits import ASSUMED_MFU, SAFETY
from sweeper.memory import predict
from sweeper.report import fmt_duration
from sweeper.scan import Scan, point_limits, scan
from sweeper.space import SearchSpace, baseline_params
from train.measure.flops import flops_per_token, gpt2_num_params
from train.measure.memory_model import ALLOCATOR_MARGIN

SWEEP_OVERHEAD_S = 15.0  # start (imports, probe, zygote) + end (plots, report): README benchmark


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
        f"~{_secs(plan.verify_trial_s)} (real full steps){_race_tail(s)}"
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


def _race_tail(s: dict) -> str:
    """The race's first rounds are counted above; say how far an undecided race may go on."""
    most, least = int(s.get("verify_max_rounds") or 0), int(s.get("verify_repeats") or 0)
    if most <= least:
        return ""
    return f"; the race may go on to {most} rounds while undecided, within the wall budget"
