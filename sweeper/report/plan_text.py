"""The plan as plan mode prints it (`hydra.sweeper.plan.enabled=true`): the device, the model, the
space after the constraints and the memory model, the dropped points with their GiB, each point
class's predicted step and limits, and the predicted wall time. The numbers are
sweeper/plan/build.py's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeper.numbers import fmt_secs
from sweeper.plan.build import SWEEP_OVERHEAD_S, SweepPlan, build_plan
from sweeper.plan.calibration import load_calibration, plan_key
from sweeper.plan.guard_price import GuardPlan
from sweeper.plan.memory_levers import plan_lever_lines
from sweeper.plan.price_sources import BASES
from sweeper.report.console import console
from sweeper.report.prior_text import point_text, prior_line
from sweeper.space.limits import ASSUMED_MFU, COMPILED_GPU_MFU, SAFETY
from sweeper.verify.guard_text import mode_text

if TYPE_CHECKING:
    from sweeper.plan.prepare import Prepared
    from sweeper.settings import SweepSettings


def print_plan(prepared: Prepared) -> dict:
    """Print the plan of the prepared sweep (nothing starts); what the sweep call returns."""
    p = prepared
    calibration = None
    if p.device.source != "plan device":  # planning for this machine: what it measured before
        storage = p.settings.storage or f"sqlite:///{Path.cwd() / 'sweeps' / 'optuna.db'}"
        calibration = load_calibration(
            storage,
            plan_key(
                model=str(p.base.get("model.name")),
                search=p.settings.search_name,
                device=p.device.name,
            ),
        )
    plan = build_plan(
        space=p.space,
        ctx=p.ctx,
        device=p.device,
        settings=p.settings,
        found=p.found,
        calibration=calibration,
    )
    console.print(format_plan(plan), markup=False)
    if p.settings.plan.json:
        path = Path(p.settings.plan.json).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(plan_numbers(plan), indent=1) + "\n")
    return {"plan": True, "kept": p.found.kept, "dropped": p.found.dropped_points}


def plan_numbers(plan: SweepPlan) -> dict[str, Any]:
    """The plan's figures as data (seconds): the predicted wall and its parts, as printed."""
    w, g = plan.wall, plan.guard
    return {
        "device": plan.device.name,
        "device_source": plan.device.source,
        "software": plan.device.software_line(),
        "model": plan.model.get("name"),
        "tokens_per_step": plan.model.get("tokens_per_step"),
        "n_search": plan.n_search,
        "n_verify": plan.n_verify,
        "wall_s": plan.wall_s,
        "wall_cap_s": plan.wall_cap_s,
        "overhead_s": w.overhead_s if w else None,
        "search_s": w.search_s if w else None,
        "once_s": w.once_s if w else None,
        "race_s": w.race_s if w else None,
        "guard_s": g.total_s if g else 0.0,
        "guard_on": bool(g and g.on),
        "runs": [
            {
                "label": r.label,
                "count": r.count,
                "each_s": r.each_s,
                "compile_s": r.compile_s,
                "note": r.note,
            }
            for r in ([*w.search, *w.once, *w.race] if w else [])
        ],
        "prior": [pt.params for pt in plan.prior.points] if plan.prior else [],
    }


def _values(p: Any) -> str:
    if p.kind == "categorical":
        text = ", ".join(str(c) for c in p.choices)
        return text + ("  (grad_accum follows)" if p.split else "")
    if p.kind == "fixed":
        return f"{p.value} (fixed)"
    step = f" step {p.step}" if p.step else ""
    return f"{p.low} .. {p.high}{step}" + (" log" if p.log else "")


def format_plan(plan: SweepPlan) -> str:
    """The plan as the lines plan mode prints: what runs where, the space that is left, the points
    the memory model drops, each point class's step and limits, and the trials and wall time."""
    return "\n".join(
        [
            *_setup_lines(plan),
            *_space_lines(plan),
            *_dropped_lines(plan),
            *plan_lever_lines(plan),
            *_class_lines(plan),
            *_prior_lines(plan),
            *_trial_lines(plan),
            *_wall_lines(plan),
            *_guard_lines(plan),
            *_source_lines(plan),
        ]
    )


def _source_lines(plan: SweepPlan) -> list[str]:
    """Where each figure that prices the plan comes from (GPU plans; sweeper/plan/
    price_sources.py): measured on this kind of GPU, measured elsewhere (this CPU, another GPU)
    and projected here, or assumed."""
    if not plan.sources:
        return []
    count = {b: sum(s.basis == b for s in plan.sources) for b in BASES}
    lines = [
        "priced from: "
        + ", ".join(f"{n} {b}" for b, n in count.items() if n)
        + f" of {len(plan.sources)} figures (measured elsewhere: on this CPU or another GPU, "
        "projected here; assumed: not measured)"
    ]
    width = max(len(s.what) for s in plan.sources)
    for s in plan.sources:
        value = _source_value(s.value, s.unit)
        lines.append(f"  {s.what:<{width}}  {value:>11}  {s.basis}: {s.source}")
    return lines


def _source_value(value: float, unit: str) -> str:
    if unit == "s":
        return fmt_secs(value)
    if unit == "share":
        return f"{value:.1%}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "us":
        return f"{value:.0f} us"
    return f"{value:.1f} {unit}"


def _setup_lines(plan: SweepPlan) -> list[str]:
    """The device, the model, the search and the starting config."""
    d, m, s = plan.device, plan.model, plan.settings
    memory = (
        f"{d.memory_gib:.4g} GiB, {plan.usable_gib:.1f} GiB usable"
        if d.memory_gib is not None and plan.usable_gib is not None
        else "memory not modelled"
    )
    return [
        f"plan: model={m['name']} on {d.name} ({d.source}), nothing is run",
        f"  device      {memory}; {d.cpu_count} CPUs for data workers"
        + (" (this machine's)" if d.source == "plan device" else ""),
        f"  model       {m['num_params']:,} params, {m['flops_per_token']:.4g} FLOPs/token, "
        f"{m['tokens_per_step']:,} tokens/step ({m['tokens_per_step'] // m['block_size']:,} "
        f"sequences of {m['block_size']})",
        f"  search      {s.search_name}: sampler {s.sampler}, pruner {s.pruner.kind}, objective "
        f"{s.objective}",
        f"  {plan.start}",
    ]


def _space_lines(plan: SweepPlan) -> list[str]:
    """Each knob's values after the constraints, and how many points each rule removed."""
    sc = plan.scan
    lines = ["space after constraints and the memory model:"]
    width = max((len(p.key) for p in plan.space.params), default=0)
    lines += [f"  {p.key:<{width}}  {_values(p)}" for p in plan.space.params]
    how = "sampled" if sc.sampled else "enumerated"
    share = f" ({100 * sc.dropped_points / sc.feasible:.0f}% of them)" if sc.feasible else ""
    lines.append(
        f"points: {sc.total:,} ({how}); constraints refuse {sc.refused:,}; "
        f"{sc.feasible:,} feasible; the memory model drops {sc.dropped_points:,}{share}"
        + (f"; out-of-memory trials rule out {sc.oom_refused:,}" if sc.oom_refused else "")
        + (f"; {sc.dominated_points:,} dominated" if sc.dominated else "")
        + f"; {sc.kept:,} run"
    )
    for reason, n in sc.reasons.most_common(5):
        lines.append(f"  refused {n:,}: {reason}")
    for key, dead in sc.dead_values.items():
        lines.append(f"  {key}: {dead} dropped (no runnable point has them)")
    return lines


Column = tuple[str, str, Callable[[Any], str]]  # title, alignment and width, the row's cell


def _table(columns: list[Column], rows: list[Any]) -> list[str]:
    """A header line of the columns' titles, then a line per row: each column is (title, alignment
    and width as in a format spec, the row's cell as text), two spaces before each."""
    return [
        "".join(f"  {title:{align}}" for title, align, _ in columns),
        *("".join(f"  {cell(row):{align}}" for _, align, cell in columns) for row in rows),
    ]


def _knob(key: str) -> Callable[[Any], str]:
    """A column's cell: the row's value of knob `key`, as text."""
    return lambda row: str(row.knobs[key])


def _dropped_lines(plan: SweepPlan) -> list[str]:
    """The points the memory model drops, grouped, each with its predicted peak."""
    if not plan.scan.dropped:
        return []
    title = (
        f"dropped by the memory model (predicted peak > {plan.usable_gib:.1f} GiB usable on "
        f"{plan.device.name}):"
    )
    return [title, *_table(DROPPED_COLUMNS, plan.scan.dropped)]


def _class_lines(plan: SweepPlan) -> list[str]:
    """Each point class's floor, predicted step, limits and trial wall time."""
    title = (
        f"per point class (tf32: fp32 with runtime.tf32=true): floor = step at 100% of the "
        f"datasheet peak; step = at {ASSUMED_MFU:.0%} MFU ({COMPILED_GPU_MFU:.0%} compiled on a "
        f"GPU, measured); limits = {SAFETY:g}x the predicted trial (never below 600 s / 300 s)"
    )
    return [title, *_table(CLASS_COLUMNS, plan.scan.classes)]


# (title, alignment and width, cell): a dropped group of points, then a point class
DROPPED_COLUMNS: list[Column] = [
    ("predicted", ">10", lambda g: f"{g.peak_gib:6.1f} GiB"),
    ("micro_batch", ">11", _knob("batch.micro_batch")),
    ("dtype", "<5", _knob("runtime.dtype")),
    ("act_ckpt", "<9", _knob("runtime.activation_checkpointing")),
    ("loss", "<7", lambda g: str(g.knobs.get("runtime.loss") or "full")),
    ("points", ">6", lambda g: f"{g.points:,}"),
    (
        "attention / compile",
        "",
        lambda g: f"{g.knobs['runtime.attention']} / {g.knobs['runtime.compile']}",
    ),
]
CLASS_COLUMNS: list[Column] = [
    ("precision", "<9", _knob("precision")),
    ("compile", "<26", _knob("runtime.compile")),
    ("act_ckpt", "<8", _knob("runtime.activation_checkpointing")),
    ("points", ">6", lambda c: f"{c.points:,}"),
    ("floor", ">8", lambda c: fmt_secs(c.floor_s)),
    ("step", ">8", lambda c: fmt_secs(c.step_s)),
    ("hard limit", ">10", lambda c: fmt_secs(c.timeout_s)),
    ("stall", ">8", lambda c: fmt_secs(c.stall_timeout_s) if c.stall_timeout_s else "off"),
    (
        "trial wall (min-max)",
        "",
        lambda c: f"{fmt_secs(c.wall_mean_s)} ({fmt_secs(c.wall_min_s)}-{fmt_secs(c.wall_max_s)})",
    ),
]


def _trial_lines(plan: SweepPlan) -> list[str]:
    """The search and verification trials, and the predicted sweep wall time."""
    s, mean = plan.settings, plan.scan.mean_trial_s
    search = "no trial limit" if plan.n_search is None else f"{plan.n_search} search"
    lines = [
        f"trials: {search} of {fmt_secs(mean)} on average (set-up and compile included) + "
        f"{plan.n_verify} verification runs ((top {s.verify.top_k}"
        f"{' + the starting config' if plan.start_runs else ''}) x {s.verify.repeats}) of "
        f"~{fmt_secs(plan.verify_trial_s)} (real full steps){_race_tail(s)}"
    ]
    if plan.wall_s is None:
        lines.append("predicted sweep wall: unknown (no runnable point, or no trial limit)")
    else:
        detail = (
            (
                f"{plan.n_search or 0} x {fmt_secs(mean)} + {plan.n_verify} x "
                f"{fmt_secs(plan.verify_trial_s)} + {SWEEP_OVERHEAD_S:.0f} s start and end"
            )
            if plan.wall is None
            else "the components below"
        )
        if plan.wall_cap_s is not None and plan.wall_s > plan.wall_cap_s + 1:
            detail += (
                f"; the {fmt_secs(plan.wall_cap_s)} wall budget stops the search, and the "
                "guard's runs and the race's first round run past it"
            )
        elif plan.wall_cap_s is not None and plan.wall_s >= plan.wall_cap_s - 1:
            detail += f"; capped by the {fmt_secs(plan.wall_cap_s)} wall budget"
        elif plan.wall_cap_s is not None:
            detail += f"; the search stops within the {fmt_secs(plan.wall_cap_s)} wall budget"
        lines.append(f"predicted sweep wall: {fmt_secs(plan.wall_s)} ({detail})")
    return lines


def _guard_lines(plan: SweepPlan) -> list[str]:
    """The numerics guard: on or off and why, its curve runs and their price."""
    if plan.guard is None:
        return []
    line = guard_text(plan.guard)
    if plan.guard.on and plan.wall_s:
        line += " (counted in the predicted sweep wall above)"
    return [line]


def guard_text(g: GuardPlan) -> str:
    """The guard's plan in one line: on or off and why, and where it runs, its runs' price."""
    mode = mode_text(g.mode)
    if g.planned_without_math is not None:
        return (
            f"numerics guard: {mode}, but none of the {g.planned_without_math} planned trial(s) "
            "(the starting config and the prior's points) changes the math: no curve runs"
        )
    if not g.on:
        return f"numerics guard: {mode}"
    refit = (
        f" (the starting config does not fit, so its reference runs the same math at "
        f"{g.refit.text()})"
        if g.refit is not None
        else ""
    )
    counted = (
        f"{g.contenders} contender run(s) (the planned points that change the math)"
        if g.contenders_planned
        else f"{g.contenders} contender runs (those that change the math)"
    )
    return (
        f"numerics guard: {mode}: the starting config's {g.seeds} seeds in one process{refit} "
        f"(~{fmt_secs(g.reference_s)}) + {counted} of {g.steps} steps of "
        f"{g.step_tokens:,} tokens = up to {fmt_secs(g.all_s)}; a contender must stay within "
        f"{g.k:g} x the starting config's seed-to-seed loss spread (at least {g.floor:g} nats) "
        "to race"
    )


def _prior_lines(plan: SweepPlan) -> list[str]:
    """The prior's points, each with why it was chosen (or why there are none)."""
    if plan.prior is None:
        return []
    line = prior_line(plan.prior)
    lines = [line + ":" if plan.prior.points else line]
    for i, p in enumerate(plan.prior.points, 1):
        lines.append(f"  {i}. {point_text(p)}")
    return lines


def _wall_lines(plan: SweepPlan) -> list[str]:
    """Where the predicted wall goes: each kind of trial process, its count, wall and compile."""
    w = plan.wall
    if w is None:
        return []
    lines = [
        "predicted wall, component by component (compile once per graph, early stop at "
        f"trial.target_ci={plan.model.get('target_ci', 0):g}):"
    ]
    for r in [*w.search, *w.once, *w.race]:
        steps = f", {r.window_steps} measured steps" if r.window_steps else ""
        comp = (
            f" (compile {fmt_secs(r.compile_s)}: {r.note})"
            if r.compile_s
            else (f" ({r.note})" if r.note else "")
        )
        lines.append(
            f"  {r.count:>2} x {fmt_secs(r.each_s):>7} = {fmt_secs(r.total_s):>7}  "
            f"{r.label}{steps}{comp}"
        )
    lines.append(f"       {fmt_secs(w.overhead_s):>7}  start and end")
    lines += [f"  ({note})" for note in w.notes]
    if plan.budget_line:
        lines.append(f"  {plan.budget_line}")
    once = f", the save measured once {fmt_secs(w.once_s)}" if w.once else ""
    lines.append(
        f"  = {fmt_secs(w.total_s)}: search {fmt_secs(w.search_s)}{once}, race {fmt_secs(w.race_s)}"
    )
    return lines


def _race_tail(s: SweepSettings) -> str:
    """The race's first rounds are counted above; say how far an undecided race may go on."""
    if s.verify.max_rounds <= s.verify.repeats:
        return ""
    return (
        f"; the race may go on to {s.verify.max_rounds} rounds while undecided, within the wall "
        "budget"
    )
