"""The plan as plan mode prints it (`hydra.sweeper.plan=true`): the device, the model, the space
after the constraints and the memory model, the dropped points with their GiB, each point class's
predicted step and limits, and the predicted wall time. The numbers are sweeper/plan/plan.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweeper.numbers import fmt_secs
from sweeper.plan.plan import SWEEP_OVERHEAD_S, SweepPlan, build_plan
from sweeper.report.console import console
from sweeper.space.limits import ASSUMED_MFU, SAFETY

if TYPE_CHECKING:
    from sweeper.plan.prepare import Prepared


def print_plan(prepared: Prepared) -> dict:
    """Print the plan of the prepared sweep (nothing starts); what the sweep call returns."""
    p = prepared
    plan = build_plan(space=p.space, ctx=p.ctx, device=p.device, settings=p.settings.as_dict(),
                      found=p.found)  # fmt: skip
    console.print(format_plan(plan), markup=False)
    return {"plan": True, "kept": p.found.kept, "dropped": p.found.dropped_points}


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
            f"{fmt_secs(c.floor_s):>8}  {fmt_secs(c.step_s):>8}  {fmt_secs(c.timeout_s):>10}  "
            f"{fmt_secs(c.stall_timeout_s) if c.stall_timeout_s else 'off':>8}  "
            f"{fmt_secs(c.wall_mean_s)} ({fmt_secs(c.wall_min_s)}-{fmt_secs(c.wall_max_s)})"
        )
    mean = sc.mean_trial_s
    search = "no trial limit" if plan.n_search is None else f"{plan.n_search} search"
    lines.append(
        f"trials: {search} of {fmt_secs(mean)} on average (set-up and compile included) + "
        f"{plan.n_verify} verification runs ((top {s.get('verify_top_k')}"
        f"{' + the starting config' if plan.start_runs else ''}) x {s.get('verify_repeats')}) of "
        f"~{fmt_secs(plan.verify_trial_s)} (real full steps){_race_tail(s)}"
    )
    if plan.wall_s is None:
        lines.append("predicted sweep wall: unknown (no runnable point, or no trial limit)")
    else:
        detail = (
            f"{plan.n_search or 0} x {fmt_secs(mean)} + {plan.n_verify} x "
            f"{fmt_secs(plan.verify_trial_s)} + {SWEEP_OVERHEAD_S:.0f} s start and end"
        )
        if plan.wall_cap_s is not None and plan.wall_s >= plan.wall_cap_s:
            detail += f"; capped by the {fmt_secs(plan.wall_cap_s)} wall budget"
        lines.append(f"predicted sweep wall: {fmt_secs(plan.wall_s)} ({detail})")
    return "\n".join(lines)


def _race_tail(s: dict) -> str:
    """The race's first rounds are counted above; say how far an undecided race may go on."""
    most, least = int(s.get("verify_max_rounds") or 0), int(s.get("verify_repeats") or 0)
    if most <= least:
        return ""
    return f"; the race may go on to {most} rounds while undecided, within the wall budget"
