"""Plan mode and the start-up scan: devices, the memory model's drops, dead choices, the
predicted wall time (pure tables), and the real `python sweep.py -m ... plan=true` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.numbers import fmt_secs
from sweeper.plan.build import SWEEP_OVERHEAD_S, build_plan, startup_lines
from sweeper.plan.plan_device import (
    DeviceFacts,
    device_facts,
    known_plan_devices,
    plan_device_facts,
)
from sweeper.plan.scan import drop_dead_values, scan
from sweeper.report.plan_text import format_plan
from sweeper.settings import settings_from
from sweeper.space.constraints import SpaceContext
from sweeper.space.search_space import parse_space
from tests.conftest import python_says
from tests.model_shapes import GPT2_XL
from tests.model_shapes import TINY as TINY_SHAPE

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"
TRIAL = {
    "trial.warmup_steps": 2,
    "trial.max_steps": 20,
    "trial.min_steps": 6,
    "trial.max_seconds": 20,
    "trial.report_every": 3,
    "trial.project_above_s": 5.0,
    "trial.project_micro_steps": 4,
}
XL = {
    "model.name": "gpt2-xl",
    **GPT2_XL,
    "model.bias": True,
    "batch.tokens_per_step": 1_048_576,
    "batch.micro_batch": 8,
    "batch.grad_accum": 128,
    "runtime.device": "auto",
    "runtime.dtype": "bf16",
    "runtime.tf32": True,
    "runtime.compile": "none",
    "runtime.attention": "auto",
    "runtime.activation_checkpointing": "none",
    "checkpoint.every_steps": 0,
    **TRIAL,
}
TINY = {
    **XL,
    "model.name": "tiny",
    **TINY_SHAPE,
    "batch.grad_accum": 64,
    "runtime.dtype": "auto",
}


def xl_ctx(device: str = H100, **kw) -> SpaceContext:
    facts = plan_device_facts(device, cpu_count=2)
    args = {
        "tokens_per_step": 1_048_576,
        "block_size": 1024,
        "cpu_count": 2,
        "device_type": "cuda",
        "bf16_supported": True,
        "base": XL,
        "device_name": facts.name,
        "device_memory_gib": facts.memory_gib,
        **kw,
    }
    return SpaceContext(**args)


# ---- devices ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gib"),
    [
        (H100, 79.19),
        ("NVIDIA H100 PCIe", 79.11),
        ("NVIDIA H100 NVL", 93.58),
        ("NVIDIA H200", 139.80),
        ("NVIDIA A100-SXM4-40GB", 39.39),
        ("NVIDIA A100-SXM4-80GB", 79.15),
        ("NVIDIA L4", 22.49),
    ],
)
def test_known_plan_devices(name, gib) -> None:
    facts = plan_device_facts(name, cpu_count=16)
    assert facts.memory_gib == pytest.approx(gib, abs=0.01)
    assert (facts.device_type, facts.bf16_supported, facts.source) == ("cuda", True, "plan device")
    assert name in known_plan_devices()


def test_an_unknown_plan_device_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"plan.device='NVIDIA H300'.*'NVIDIA H200'"):
        plan_device_facts("NVIDIA H300", cpu_count=2)


PROBED_GPU = {
    "device_type": "cuda",
    "device_name": "NVIDIA H100 80GB HBM3",
    "device_memory_gib": 79.19,
    "bf16_supported": True,
    "cpu_count": 16,
    "torch": "2.11",
}
PROBED_CPU = {
    "device_type": "cpu",
    "device_name": None,
    "device_memory_gib": None,
    "bf16_supported": False,
    "cpu_count": 2,
}


@pytest.mark.parametrize(
    ("probed", "plan_device", "expected"),
    [
        (PROBED_GPU, "", ("NVIDIA H100 80GB HBM3", "cuda", 79.19, 16, "probed")),
        # a CPU: no device memory, so no memory-model refusals
        (PROBED_CPU, "", ("cpu", "cpu", None, 2, "probed")),
        # a plan device replaces the probed name and memory; trials still run where probed
        (PROBED_GPU, "NVIDIA H200", ("NVIDIA H200", "cuda", 139.80, 16, "plan device")),
        (PROBED_CPU, "NVIDIA L4", ("NVIDIA L4", "cpu", 22.49, 2, "plan device")),
        # plan mode with a plan device probes nothing
        (None, "NVIDIA H200", ("NVIDIA H200", "cuda", 139.80, 4, "plan device")),
    ],
)
def test_device_facts(probed, plan_device, expected) -> None:
    d = device_facts(probed, plan_device=plan_device, cpu_count=4)
    memory = None if d.memory_gib is None else round(d.memory_gib, 2)
    assert (d.name, d.device_type, memory, d.cpu_count, d.source) == expected


# ---- the scan -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "space", "dropped", "dominated", "kept"),
    [
        # XL bf16 on an H100 (72.9 GiB usable): micro-batch 8 fits (52 GiB measured), 32 does
        # not without activation checkpointing
        (H100, {"batch.micro_batch": "choice(8, 32)"}, [(32, "none")], {}, 1),
        (
            H100,
            {
                "batch.micro_batch": "choice(8, 32)",
                "runtime.activation_checkpointing": "choice(none, every)",
            },
            [(32, "none")],
            # 8 fits without recompute: recomputing there only costs
            {("every", "none"): 1},
            2,
        ),
        # the H200's 139.8 GiB holds 32 with activation checkpointing too
        (
            "NVIDIA H200",
            {
                "batch.micro_batch": "choice(8, 32)",
                "runtime.activation_checkpointing": "choice(none, every)",
            },
            [(32, "none")],
            {("every", "none"): 1},
            2,
        ),
        # an L4 (22.5 GiB) holds no XL step at all in these
        ("NVIDIA L4", {"batch.micro_batch": "choice(4, 8)"}, [(8, "none"), (4, "none")], {}, 0),
    ],
)
def test_the_memory_model_drops_what_cannot_fit(device, space, dropped, dominated, kept) -> None:
    ctx = xl_ctx(device)
    found = scan(parse_space(space, ctx), ctx)
    got = [
        (g.knobs["batch.micro_batch"], g.knobs["runtime.activation_checkpointing"])
        for g in found.dropped
    ]
    assert got == dropped
    assert all(g.peak_gib > ctx.device_memory_gib * 0.92 for g in found.dropped)
    assert dict(found.dominated) == dominated
    assert found.kept == kept
    assert found.feasible == found.kept + found.dropped_points + found.dominated_points


def test_points_multiply_by_the_keys_no_rule_reads() -> None:
    ctx = xl_ctx()
    space = parse_space(
        {
            "batch.micro_batch": "choice(8, 32)",
            "data.prefetch_factor": "choice(2, 4, 8)",
            "checkpoint.mode": "choice(sync, async)",
        },
        ctx,
    )
    found = scan(space, ctx)
    assert (found.total, found.kept, found.dropped_points) == (12, 6, 6)
    assert not found.sampled


def test_the_mean_trial_averages_the_compile_units_the_space_searches() -> None:
    from sweeper.forecast.costs import BLOCK_UNIT_LAYERS, GPU_DEFAULT

    ctx = xl_ctx()  # an H100: the H200's compile, 62.9 s at 48 layers
    per_layer = GPU_DEFAULT.compile_cold_s / 48
    compiled = {"batch.micro_batch": "choice(8)", "runtime.compile": "choice(default)"}
    whole = scan(parse_space(compiled, ctx), ctx).mean_trial_s
    both = {**compiled, "runtime.compile_unit": "choice(model, block)"}
    found = scan(parse_space(both, ctx), ctx)
    assert found.kept == 2  # the unit is counted, not enumerated
    # half the draws compile the whole model, half one block's worth (10.4 layers)
    saved = (per_layer * 48 - per_layer * BLOCK_UNIT_LAYERS) / 2
    assert whole - found.mean_trial_s == pytest.approx(saved)
    eager = {"batch.micro_batch": "choice(8)", "runtime.compile": "choice(none)"}
    unit = {**eager, "runtime.compile_unit": "choice(model, block)"}
    assert scan(parse_space(unit, ctx), ctx).mean_trial_s == pytest.approx(
        scan(parse_space(eager, ctx), ctx).mean_trial_s
    )  # eager compiles nothing either way


def test_a_choice_no_runnable_point_has_is_dropped_before_sampling() -> None:
    ctx = xl_ctx()
    space = parse_space(
        {"batch.micro_batch": "choice(4, 8, 32)", "runtime.dtype": "choice(bf16, fp32)"}, ctx
    )
    found = scan(space, ctx)
    assert found.dead_values == {"batch.micro_batch": [32]}
    kept = drop_dead_values(space, found)
    assert kept.searched[0].choices == (4, 8)
    assert "batch.micro_batch: dropped [32] before sampling" in "\n".join(startup_lines(found, ctx))


def test_refusals_and_out_of_memory_trials_are_counted_apart() -> None:
    from sweeper.space.memory import OutOfMemory

    ctx = xl_ctx(
        ooms=[OutOfMemory(trial=3, config={**XL, "batch.micro_batch": 4, "batch.grad_accum": 256})]
    )
    space = parse_space(
        {"batch.micro_batch": "choice(2, 4, 8)", "runtime.compile": "choice(none, max-autotune)"},
        ctx,
    )
    found = scan(space, ctx)
    # max-autotune captures CUDA graphs: refused with grad_accum > 1 (every split here)
    assert found.refused == 3
    assert found.oom_refused == 2  # micro-batch 4 and 8, eager, like trial 3
    assert found.kept == 1


def test_cpu_points_keep_the_fixed_limits_and_drop_nothing_for_memory() -> None:
    ctx = SpaceContext(
        tokens_per_step=4096, block_size=64, cpu_count=2, device_type="cpu", base=TINY
    )
    space = parse_space(
        {"batch.micro_batch": "choice(8, 16)", "runtime.compile": "choice(none, default)"}, ctx
    )
    found = scan(space, ctx)
    assert (found.kept, found.dropped_points) == (4, 0)
    assert {(c.timeout_s, c.stall_timeout_s) for c in found.classes} == {(600.0, 300.0)}
    assert not any(line.startswith("memory model") for line in startup_lines(found, ctx))


# ---- the plan -----------------------------------------------------------------------------------

SETTINGS = {
    "search_name": "t",
    "sampler": "tpe",
    "pruner.kind": "median",
    "objective": "tokens_per_s",
    "n_trials": 14,
    "verify.top_k": 3,
    "verify.repeats": 3,
}


@pytest.mark.parametrize(
    ("settings", "device_type", "n_search", "capped"),
    [
        ({}, "cuda", 14, None),
        ({"sampler": "grid", "n_trials": 0}, "cuda", 2, None),  # the grid's runnable points
        ({"sampler": "grid", "n_trials": 1}, "cuda", 1, None),
        ({"budget.max_wall_s": 60.0}, "cuda", 14, 60.0),  # a wall budget caps the prediction
        ({"budget.cpu_max_wall_s": 390.0}, "cpu", 14, 390.0),  # the CPU demo's cap
        ({"n_trials": 0}, "cuda", None, None),  # no trial limit and no budget: unknown
    ],
)
def test_the_predicted_sweep_wall(settings, device_type, n_search, capped) -> None:
    ctx = xl_ctx()
    space = parse_space({"batch.micro_batch": "choice(4, 8, 32)"}, ctx)
    device = DeviceFacts(
        name=H100,
        device_type=device_type,
        memory_gib=ctx.device_memory_gib,
        bf16_supported=True,
        cpu_count=2,
        source="plan device",
    )
    plan = build_plan(
        space=space, ctx=ctx, device=device, settings=settings_from({**SETTINGS, **settings})
    )
    assert plan.n_search == n_search and plan.n_verify == 12  # (top 3 + the start) x 3
    mean = plan.scan.mean_trial_s
    # a verification run measures real full steps: longer than a projected search trial
    assert plan.verify_trial_s > mean
    if n_search is None:
        assert plan.wall_s is None
    elif capped is None:
        # the starting config and the prior's points priced one by one, the rest at the mean
        # (tests/sweeper/test_plan_wall.py has the components), then the race
        rows = plan.wall.search
        assert sum(r.count for r in rows) == n_search
        assert rows[0].label == "starting config"
        assert plan.wall_s == pytest.approx(
            SWEEP_OVERHEAD_S + sum(r.total_s for r in rows) + 12 * plan.verify_trial_s
        )
    else:
        # the budget stops the search (one trial at least) and never cuts the race's first round
        # (tests/sweeper/test_plan_wall.py has the rule's table)
        assert plan.wall_s >= plan.wall.search[0].each_s + plan.verify_trial_s
        assert f"under the {fmt_secs(capped)} wall budget" in plan.budget_line


def test_format_plan_lists_each_dropped_point_with_its_gib() -> None:
    ctx = xl_ctx()
    space = parse_space(
        {"batch.micro_batch": "choice(8, 16, 32)", "runtime.attention": "choice(flash, efficient)"},
        ctx,
    )
    device = plan_device_facts(H100, cpu_count=2)
    text = format_plan(
        build_plan(space=space, ctx=ctx, device=device, settings=settings_from(SETTINGS))
    )
    assert "dropped by the memory model (predicted peak > 72.9 GiB usable" in text
    # the two fused kernels predict the same memory: one row each for 16 and 32
    assert re.search(r"77\.7 GiB\s+16\s+bf16\s+none\s+full\s+2\s+flash,efficient / none", text)
    assert re.search(r"129\.4 GiB\s+32\s+bf16\s+none\s+full\s+2\s+flash,efficient / none", text)
    assert re.search(r"batch\.micro_batch\s+8, 16, 32\n", text)
    assert re.search(r"bf16\s+none\s+none\s+2\s+10\.9 s\s+36\.3 s\s+10m00s\s+5m00s", text)
    assert "predicted sweep wall:" in text


# ---- the real command ---------------------------------------------------------------------------


def _plan(
    tmp_path: Path, *overrides: str, extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        str(REPO / "sweep.py"),
        "-m",
        "search=throughput",
        "model=gpt2-xl",
        "batch.tokens_per_step=1048576",
        "hydra.sweeper.plan.enabled=true",
        *overrides,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_plan_mode_prints_the_plan_and_starts_nothing(tmp_path: Path) -> None:
    # the seed's split: 16 x 64 x 1024
    proc = _plan(
        tmp_path,
        f"hydra.sweeper.plan.device={H100}",
        "batch.micro_batch=16",
        "batch.grad_accum=64",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # the seed's own config (16 x 64, no activation checkpointing) does not fit 80 GB: said first
    assert re.search(
        r"starting config \(micro_batch=16 x grad_accum=64.*\), predicted 77\.7 GiB: "
        r"NOT RUN \(predicted 77\.7 GiB > 79\.19 GiB",
        out,
    )
    assert f"plan: model=gpt2-xl on {H100} (plan device), nothing is run" in out
    # micro-batch 16 without activation checkpointing ran out of memory on a real H100: dropped,
    # with its predicted GiB; micro-batch 8 (52.3 GiB measured) is not
    assert re.search(r"\d+\.\d GiB\s+16\s+bf16\s+none\s+full\s+[\d,]+\s+auto", out)
    assert not re.search(r"GiB\s+8\s+bf16\s+none\s+\w+\s+[\d,]+\s+auto", out)
    # on a GPU search=throughput runs 5 trials and one verification run (the start cannot run
    # here); tests/sweeper/test_plan_wall.py checks the wall's components
    assert re.search(r"trials: 5 search of \S+ on average .* \+ 1 verification runs", out)
    assert "predicted sweep wall: " in out
    assert "memory model (NVIDIA H100 80GB HBM3, 79.19 GiB): drops" in out + proc.stderr
    # no trial, no zygote, no study, no MLflow run, no sweep dir
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _plan_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """A plan's lines without the log lines' timestamps."""
    return [re.sub(r"^\[[^]]*\]", "", line) for line in (proc.stdout + proc.stderr).splitlines()]


def test_a_plan_device_is_planned_with_its_machines_software_not_this_ones(tmp_path: Path) -> None:
    # this machine without torchao (a sitecustomize hides it from importlib's find_spec) prints
    # the same plan as with it: float8 is planned as the GPU image has it
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['torchao'] = None\n")
    args = (f"hydra.sweeper.plan.device={H100}", "batch.micro_batch=16", "batch.grad_accum=64")
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    with_ao = _plan(tmp_path / "with", *args)
    path = os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    probe = python_says("import importlib.util as u; print(u.find_spec('torchao'))", env=env)
    assert probe.strip() == "None"  # torchao is hidden in that environment
    without = _plan(tmp_path / "without", *args, extra_env={"PYTHONPATH": path})
    assert with_ao.returncode == without.returncode == 0, without.stderr[-2000:]
    assert _plan_lines(with_ao) == _plan_lines(without)
    text = "\n".join(_plan_lines(with_ao))
    assert "plan assumes NVIDIA H100 80GB HBM3's machine has torchao installed, no FA3/FA4" in text
    assert "runtime.float8=tensorwise on the largest fit" in text  # the prior's float8 point
    assert "attention=fa3" not in text.split("prior:")[1]  # no FA3 point planned


def test_plan_software_is_an_assumption_the_user_can_change(tmp_path: Path) -> None:
    proc = _plan(tmp_path, f"hydra.sweeper.plan.device={H100}", "hydra.sweeper.plan.software=''")
    text = "\n".join(_plan_lines(proc))
    assert proc.returncode == 0, text[-2000:]
    assert "machine has torchao absent, no FA3/FA4" in text
    assert "runtime.float8=tensorwise on the largest fit" not in text
    bad = _plan(tmp_path, f"hydra.sweeper.plan.device={H100}", "hydra.sweeper.plan.software=fa5")
    assert bad.returncode != 0
    assert "hydra.sweeper.plan.software='fa5': ['fa5'] unknown" in bad.stdout + bad.stderr


@pytest.mark.parametrize(
    ("software", "torchao", "flash"),
    [(("torchao",), True, ()), ((), False, ()), (("torchao", "fa3"), True, ("fa3",))],
)
def test_a_plan_devices_software(software, torchao, flash) -> None:
    d = device_facts(None, plan_device="NVIDIA H200", cpu_count=4, software=software)
    assert (d.torchao, d.flash_attention_impls) == (torchao, flash)
    probed = device_facts(PROBED_GPU, plan_device="", cpu_count=4)
    assert probed.torchao is None and probed.software_line() == ""  # trials here: ask here


def test_an_unknown_plan_device_is_a_clear_error(tmp_path: Path) -> None:
    proc = _plan(tmp_path, "hydra.sweeper.plan.device=NVIDIA H300")
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert "hydra.sweeper.plan.device='NVIDIA H300' is not a known device" in err
    assert "NVIDIA H100 80GB HBM3" in err


def test_planning_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from sweeper.report.plan_text import format_plan\n"
        "from sweeper.plan.plan_device import plan_device_facts, known_plan_devices\n"
        "import sweeper.space.limits, sweeper.space.memory\n"
        "plan_device_facts('NVIDIA H200', cpu_count=2); known_plan_devices()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
