"""The stages' bodies: plan, sweep, production, and ddp on a host with several GPUs.

Each reads what earlier stages left in the work folder and the evidence, runs its children
against the stage's deadline, and writes its part of the evidence. None of them packs the state or
times itself: sweeper-style orchestration (unpack, deadline, pack, report) lives in
acceptance/run.py.

    plan        probe the device; the sweep's own plan for it (plan mode: nothing runs); the
                starting config from the memory model; the memory points measured, each a
                scripts/gpu_check.py trial (its ceiling, peak, tokens/s, compile seconds)
    sweep       `python sweep.py -m ...` on the study in the work folder, resumed by every later
                sweep stage: the first searches and stops where the race starts, the next
                races (and finishes the search if the first was cut) to a verified best.yaml
    production  `python -m train --config-path <sweep dir> --config-name best` for a few steps
    ddp         one trial of best.yaml (or the start) with runtime.nproc=2: NCCL on two GPUs
                (gloo ranks in the CPU dry run), beside the single-GPU race figure; skipped at
                once on a host with one GPU
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceptance.commands import (
    REPO,
    child_env,
    ddp_argv,
    ddp_split,
    production_argv,
    race_stop_reason,
    storage_url,
    study_name,
    sweep_argv,
)
from acceptance.deadline import Ran, run_until
from acceptance.evidence import collect_sweep, device_section, production_figures, result_figures
from acceptance.plan import Point, memory_points, predicted_gib, starting_point
from acceptance.profiles import Profile

log = logging.getLogger(__name__)

MIN_CHECK_S = 20.0  # a memory point is not started with less than this left in the stage
PLAN_TEXT_LINES = 120  # lines of the sweep's plan kept in the evidence


@dataclass(kw_only=True)
class StageContext:
    """What a stage body works with."""

    profile: Profile
    work: Path
    evidence: dict[str, Any]
    deadline: float  # on `clock`: children are stopped here (the state is packed after it)
    logs: Path  # folder for the children's output (the GPU host returns it)
    clock: Callable[[], float] = field(default=time.monotonic)
    run: int = 1  # this stage's run in the acceptance run (the second sweep stage is run 2)

    @property
    def sweep_overrides(self) -> list[str]:
        """Extra sweep overrides, fixed at the run's first stage (--sweep-override)."""
        return list(self.evidence.get("sweep_overrides", []))

    def left_s(self) -> float:
        return self.deadline - self.clock()

    @property
    def sweep_dir(self) -> Path:
        return self.work / "sweep"

    def run_child(self, argv: Sequence[str], *, log_path: Path, label: str, **options: Any) -> Ran:
        """`argv` in the work folder with the children's environment until it exits or the
        stage's deadline passes (run_until; `options`: its grace_s and stop_when)."""
        return run_until(
            argv,
            cwd=self.work,
            env=child_env(),
            log_path=log_path,
            deadline=self.deadline,
            label=label,
            clock=self.clock,
            **options,
        )


@dataclass(frozen=True, kw_only=True)
class StageOutcome:
    outcome: str  # done | cut | stopped | skipped | failed
    note: str = ""


def model_fields(model: str) -> dict[str, Any]:
    """The preset's shape (conf/model/<model>.yaml), for the memory model."""
    from omegaconf import OmegaConf

    doc = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "model" / f"{model}.yaml"))
    assert isinstance(doc, dict)
    return {k: v for k, v in doc.items() if k != "name"}


def _probe_and_start(ctx: StageContext) -> tuple[dict[str, Any], dict[str, Any], Point]:
    """Probe the device and choose the starting config (the best predicted to fit, the user's
    micro-batch 16 compiled where it does), recorded in the evidence: (probe, model, start)."""
    from sweeper.plan.plan_device import probe_device

    p = ctx.profile
    probe = probe_device()
    if p.device == "cuda" and probe["device_type"] != "cuda":
        raise ValueError(
            f"--profile {p.name} needs a CUDA device and torch {probe['torch']} sees none; use "
            f"--dry-run (the tiny model on this CPU) to rehearse the stages"
        )
    model = model_fields(p.model)
    kind, memory = probe["device_type"], probe.get("device_memory_gib")
    start = starting_point(p, model, device_type=kind, memory_gib=memory)
    ctx.evidence["plan"] = {
        "start": {
            **start.as_dict(),
            "grad_accum": start.grad_accum(p),
            "predicted_gib": predicted_gib(p, model, start, device_type=kind),
        },
        "device_memory_gib": memory,
    }
    return probe, model, start


def lease_stage(ctx: StageContext) -> StageOutcome:
    """A lease's main command: probe, the starting config, then the whole sweep (search, guard
    and race in one run, its wall budget the time left) to a verified best.yaml."""
    probe, _, start = _probe_and_start(ctx)
    log.info(
        "start: %s (predicted %.1f GiB)", start.name, ctx.evidence["plan"]["start"]["predicted_gib"]
    )
    outcome = sweep_stage(ctx)
    ran = [t for t in (ctx.evidence.get("sweep") or {}).get("trials", []) if t.get("status")]
    ctx.evidence["device"] = device_section(probe, _sweep_results(ctx) if ran else [])
    return outcome


def _sweep_results(ctx: StageContext) -> list[dict]:
    from train.core.result import read_result

    found = [
        read_result(path)
        for path in sorted(ctx.sweep_dir.glob("*/result.json"))
        if path.parent.name.isdigit()
    ]
    return [r for r in found if r]


def plan_stage(ctx: StageContext) -> StageOutcome:
    """Probe, plan, choose the start, measure the memory points not measured yet."""
    p = ctx.profile
    probe, model, start = _probe_and_start(ctx)
    kind, memory = probe["device_type"], probe.get("device_memory_gib")
    points = memory_points(p, model, start, device_type=kind, memory_gib=memory)
    ctx.evidence["plan"]["points"] = [pt.name for pt in points]
    log.info(
        "start: %s (predicted %.1f GiB); memory points: %s",
        start.name,
        ctx.evidence["plan"]["start"]["predicted_gib"],
        ", ".join(pt.name for pt in points),
    )
    plan_log = ctx.logs / "plan.log"
    argv = sweep_argv(p, ctx.work, start, plan=True, extra=ctx.sweep_overrides)
    ran = ctx.run_child(argv, log_path=plan_log, label="sweep plan")
    text = plan_log.read_text().splitlines() if plan_log.is_file() else []
    ctx.evidence["plan"]["text"] = text[-PLAN_TEXT_LINES:]
    ctx.evidence["plan"]["returncode"] = ran.returncode
    if ran.returncode != 0:
        raise RuntimeError(f"the sweep's plan failed (exit {ran.returncode}); see {plan_log}")
    measured = {m["point"]: m for m in ctx.evidence.get("memory", [])}
    results = []
    for point in points:
        if measured.get(point.name, {}).get("status") == "complete":
            continue  # measured by an earlier, cut run of this stage
        if ctx.left_s() < MIN_CHECK_S:
            ctx.evidence["device"] = device_section(probe, results)
            return StageOutcome(outcome="cut", note=f"no time left for memory point {point.name}")
        result = _memory_check(ctx, point, model, kind)
        results.append(result)
        measured[point.name] = {
            "point": point.name,
            **point.as_dict(),
            "grad_accum": 2,
            "predicted_gib": predicted_gib(ctx.profile, model, point, device_type=kind),
            **result_figures(result),
        }
    ctx.evidence["memory"] = list(measured.values())
    ctx.evidence["device"] = device_section(probe, results or _earlier_results(ctx))
    return StageOutcome(outcome="done")


def _memory_check(ctx: StageContext, point: Point, model: dict, kind: str) -> dict:
    """One memory point as scripts/gpu_check.py runs a check: its own trial process, 2
    micro-batches a step (memory needs only "more than one"), real steps."""
    import gpu_check

    p = ctx.profile
    check = gpu_check.Check(
        model=p.model,
        compile=point.compile,
        micro_batch=point.micro_batch,
        grad_accum=2,
        block_size=p.block_size,
    )
    args = argparse.Namespace(
        device=p.device,
        dtype=p.dtype,
        activation_checkpointing=point.activation_checkpointing,
        data_dir=str(ctx.work / "data" / "synthetic"),
        warmup_steps=1,
        steps=p.check_steps,
        max_seconds=p.check_max_seconds,
        timeout=max(1.0, ctx.left_s()),
    )
    work = ctx.work / "memory" / point.name
    work.mkdir(parents=True, exist_ok=True)
    return gpu_check.run_check(check, args, work)


def _earlier_results(ctx: StageContext) -> list[dict]:
    from train.core.result import read_result

    found = [read_result(path) for path in sorted((ctx.work / "memory").glob("*/*.json"))]
    return [r for r in found if r]


def sweep_stage(ctx: StageContext) -> StageOutcome:
    """Run or resume the sweep until it exports best.yaml or the stage's time is up."""
    p = ctx.profile
    best = ctx.sweep_dir / "best.yaml"
    if best.is_file():
        return StageOutcome(outcome="skipped", note=f"{best} exists: the sweep is finished")
    start_doc = ctx.evidence.get("plan", {}).get("start")
    if not start_doc:
        raise ValueError("no starting config in the evidence: run --stage plan first")
    start = Point(
        micro_batch=start_doc["micro_batch"],
        compile=start_doc["compile"],
        activation_checkpointing=start_doc["activation_checkpointing"],
    )
    max_wall_s = ctx.left_s() - p.grace_s
    if max_wall_s < p.min_sweep_s:
        return StageOutcome(outcome="cut", note=f"{ctx.left_s():.0f} s left: too little to sweep")
    searching = ctx.run <= p.search_runs
    # A search stage ends at the race (the next stage's) and has no wall budget of the sweep's
    # own; a race stage's wall budget ends its rounds in time. The deadline is the backstop.
    race_round_s = math.inf if searching else p.race_round_s
    ran = ctx.run_child(
        sweep_argv(
            p,
            ctx.work,
            start,
            max_wall_s=0.0 if searching else max_wall_s,
            extra=ctx.sweep_overrides,
        ),
        log_path=ctx.logs / "sweep.log",
        label="sweep",
        grace_s=p.grace_s,
        stop_when=lambda line: race_stop_reason(
            line, left_s=ctx.left_s(), race_round_s=race_round_s
        ),
    )
    ctx.evidence["sweep"] = collect_sweep(
        storage=storage_url(ctx.work), study_name=study_name(p), sweep_dir=ctx.sweep_dir
    )
    if best.is_file():
        return StageOutcome(outcome="done", note=f"verified best.yaml: {best}")
    if ran.cut:
        return StageOutcome(outcome="cut", note="the stage's deadline stopped the sweep")
    if ran.stopped:
        return StageOutcome(outcome="stopped", note=ran.stopped)
    return StageOutcome(
        outcome="failed", note=f"the sweep exited {ran.returncode} without best.yaml; see sweep.log"
    )


def production_stage(ctx: StageContext) -> StageOutcome:
    """The production trainer on best.yaml for a few steps, beside the race's tokens/s."""
    best = ctx.sweep_dir / "best.yaml"
    if not best.is_file():
        raise ValueError(f"no {best}: run --stage sweep again until it says 'done'")
    argv = production_argv(ctx.profile, ctx.work, best)
    ran = ctx.run_child(
        argv,
        log_path=ctx.logs / "production.log",
        label="production run",
        grace_s=ctx.profile.grace_s,
    )
    summary_path = ctx.work / "production" / "train_summary.json"
    figures = {}
    if summary_path.is_file():
        figures = production_figures(json.loads(summary_path.read_text()))
    race_tps = (ctx.evidence.get("sweep", {}).get("best") or {}).get("race_tokens_per_s")
    tps = figures.get("tokens_per_s")
    ctx.evidence["production"] = {
        "command": " ".join(["python", *argv[1:]]),
        "returncode": ran.returncode,
        "wall_s": ran.wall_s,
        **figures,
        "race_tokens_per_s": race_tps,
        "ratio_to_race": tps / race_tps if tps and race_tps else None,
    }
    if ran.cut:
        return StageOutcome(outcome="cut", note="the stage's deadline stopped the production run")
    if ran.returncode != 0 or tps is None:
        return StageOutcome(outcome="failed", note=f"python -m train exited {ran.returncode}")
    return StageOutcome(outcome="done")


def _start_point(doc: dict[str, Any]) -> Point:
    """The starting config the plan stage recorded (evidence plan.start)."""
    return Point(
        micro_batch=doc["micro_batch"],
        compile=doc["compile"],
        activation_checkpointing=doc["activation_checkpointing"],
    )


def ddp_skip_reason(profile: Profile, device_count: int) -> str:
    """Why the ddp stage does not run ("" when it does): a CUDA profile needs a GPU per process;
    a CPU profile runs its processes as gloo ranks on any host."""
    if profile.device != "cuda" or device_count >= profile.ddp_nproc:
        return ""
    return f"skipped: {device_count} GPU{'' if device_count == 1 else 's'}"


def cuda_device_count() -> int:
    """CUDA devices torch sees (CUDA_VISIBLE_DEVICES applies), 0 without CUDA."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def single_gpu_reference(evidence: dict[str, Any], *, best: bool) -> tuple[float | None, str]:
    """The single-GPU tokens/s the data-parallel trial is compared with, and where it is from:
    best.yaml's median over its real full-step race runs; without best.yaml, the starting
    config's search trial (or its memory point)."""
    sweep = evidence.get("sweep") or {}
    if best:
        tps = (sweep.get("best") or {}).get("race_tokens_per_s")
        return tps, "best.yaml's race (real full steps, median)"
    for t in sweep.get("trials", []):
        if t.get("start") and t.get("outcome") == "complete" and t.get("tokens_per_s"):
            return t["tokens_per_s"], f"the starting config's search trial {t['number']}"
    start = (evidence.get("plan") or {}).get("start") or {}
    name = _start_point(start).name if start else None
    for m in evidence.get("memory", []):
        if m.get("point") == name and m.get("status") == "complete" and m.get("tokens_per_s"):
            return m["tokens_per_s"], f"the starting config's memory point {name}"
    return None, "none measured"


def ddp_stage(ctx: StageContext, *, device_count: Callable[[], int] | None = None) -> StageOutcome:
    """One data-parallel trial on `ddp_nproc` GPUs: tokens/s, MFU against those devices, the
    exposed comms fraction, and the scaling efficiency against the single-GPU figure. On a host
    with fewer GPUs it records why and ends at once."""
    p = ctx.profile
    count = (device_count or cuda_device_count)() if p.device == "cuda" else 0
    skip = ddp_skip_reason(p, count)
    if skip:
        ctx.evidence["ddp"] = {
            "outcome": "skipped",
            "reason": skip,
            "device_count": count,
            "nproc": p.ddp_nproc,
        }
        return StageOutcome(outcome="skipped", note=skip)
    best = ctx.sweep_dir / "best.yaml"
    start_doc = ctx.evidence.get("plan", {}).get("start")
    if not best.is_file() and not start_doc:
        raise ValueError(
            "no best.yaml and no starting config in the evidence: run --stage plan "
            "(and the sweep) first"
        )
    start = _start_point(start_doc) if start_doc else None
    if best.is_file():
        from omegaconf import OmegaConf

        doc = OmegaConf.load(best)
        one = (int(doc.batch.micro_batch), int(doc.batch.grad_accum))
    else:
        assert start is not None
        one = (start.micro_batch, start.grad_accum(p))
    split = ddp_split(*one, world=p.ddp_nproc)
    argv = ddp_argv(
        p, ctx.work, best_yaml=best if best.is_file() else None, start=start, split=split
    )
    result_path = ctx.work / "ddp" / "trial.json"
    result_path.unlink(missing_ok=True)  # an earlier, failed try's result is not this one's
    ran = ctx.run_child(
        argv, log_path=ctx.logs / "ddp.log", label="data-parallel trial", grace_s=p.grace_s
    )
    from train.core.result import read_result

    result = read_result(result_path)
    figures = result_figures(result)
    single, source = single_gpu_reference(ctx.evidence, best=best.is_file())
    tps = figures.get("tokens_per_s")
    ctx.evidence["ddp"] = {
        "outcome": "ran",
        "device_count": count or None,
        "nproc": p.ddp_nproc,
        "backend": "nccl" if p.device == "cuda" else "gloo",
        "config": "best.yaml" if best.is_file() else "start",
        "single_split": {"micro_batch": one[0], "grad_accum": one[1]},
        "per_process_split": {"micro_batch": split[0], "grad_accum": split[1]},
        "command": " ".join(["python", *argv[1:]]),
        "returncode": ran.returncode,
        "wall_s": ran.wall_s,
        "world_size": (result or {}).get("world_size"),
        **figures,
        "comms_frac": (figures.get("time_frac") or {}).get("comms"),
        "single_gpu_tokens_per_s": single,
        "single_gpu_source": source,
        "scaling_efficiency": tps / (p.ddp_nproc * single) if tps and single else None,
    }
    if ran.cut:
        return StageOutcome(outcome="cut", note="the stage's deadline stopped the trial")
    if ran.returncode != 0 or figures.get("status") != "complete" or tps is None:
        why = figures.get("failure_message") or f"exit {ran.returncode}"
        return StageOutcome(outcome="failed", note=f"the data-parallel trial failed: {why}")
    return StageOutcome(outcome="done")


BODIES: dict[str, Callable[[StageContext], StageOutcome]] = {
    "lease": lease_stage,
    "plan": plan_stage,
    "sweep": sweep_stage,
    "production": production_stage,
    "ddp": ddp_stage,
}
