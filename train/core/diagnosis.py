"""The bottleneck verdict of one trial result: pure classification and expected gain of each fix.

`diagnose(result)` reads a trial result (schema in train/core/result.py) and names where the step
time goes: data-bound, checkpoint-bound, comms-bound, compile-dominated, host/launch-bound or
compute-bound. The shares that can be measured (data wait, checkpoint stall, comms, compile over a
planned run) are checked first against their thresholds and the largest wins; host/launch-bound is
inferred next; compute-bound is what remains. Every fix carries an expected gain computed from the
result's own numbers ("up to", an Amdahl bound), never a canned sentence: the fixes of each
verdict are train/core/bottleneck_fixes.py's. The verdict is data (its kind and its numbers);
train/core/diagnosis_text.py writes its sentences.

Host/launch-bound signal. Eager PyTorch pays a fixed host cost per op (Python, dispatcher, autograd,
kernel launch) that does not grow with the micro-batch. A step is host-bound when that cost
exceeds the math: on CUDA with telemetry, the GPU is idle much of the time (low `sm_util_pct`)
while the compute phase reaches under half the matmul ceiling; everywhere, when the estimated
per-micro-step launch time (ops x per-op overhead) exceeds the micro-step's FLOPs at the measured
matmul ceiling, and the compute phase again runs under half that ceiling; or when the untimed
`other` share (syncs, Python between phases) is large.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from train.core.bottleneck_fixes import (
    COMPILED_OPS_PER_BLOCK,
    EAGER_OPS_PER_BLOCK,
    HOST_OP_OVERHEAD_S,
    OPS_OUTSIDE_BLOCKS,
    Fix,
    StepFacts,
    verdict_fixes,
)

# A measured share at or above these names the bottleneck (fractions of the measured step time;
# compile: of the planned run's wall time). 15%: a fix would give >= 1.18x, worth a headline.
DATA_BOUND_MIN_FRAC = 0.15
CHECKPOINT_BOUND_MIN_FRAC = 0.15
COMMS_BOUND_MIN_FRAC = 0.15
COMPILE_DOMINATED_MIN_FRAC = 0.25
# Host signals: untimed share, compute-phase efficiency against the matmul ceiling, GPU busy %.
HOST_OTHER_MIN_FRAC = 0.25
HOST_MAX_COMPUTE_EFFICIENCY = 0.5
HOST_MAX_SM_UTIL_PCT = 60.0

VERDICTS = (
    "failed",
    "data-bound",
    "checkpoint-bound",
    "comms-bound",
    "compile-dominated",
    "host-bound",
    "compute-bound",
)
# What the host/launch verdict read: the untimed share, the GPU's busy %, the estimated launch time
# against the math at the ceiling, or nothing to size the math against.
HOST_SIGNALS = ("untimed_other", "gpu_busy", "launch_vs_math", "no_reference")


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """The verdict, the numbers that state it, the numbers behind it and what to do."""

    # One of VERDICTS.
    verdict: str
    # The deciding numbers the verdict is stated with (diagnosis_text.headline_text says them).
    numbers: dict[str, Any]
    # Fractions, MFU, efficiencies, device samples: the numbers the verdict rests on.
    evidence: dict[str, Any]
    # Fixes, most promising first.
    fixes: list[Fix]
    # Seconds per measured step by phase (mean step), warm-up and compile reported beside them.
    attribution_s: dict[str, float | None] = field(default_factory=dict)
    # Other thresholds that were also crossed (secondary bottlenecks).
    secondary: list[str] = field(default_factory=list)
    # The host/launch signal read and its numbers: {"signal": one of HOST_SIGNALS, ...}.
    host_signal: dict[str, Any] = field(default_factory=dict)


def compile_share(*, compile_s: float, step_s: float, planned_steps: int) -> float:
    """Share of a planned run's wall time spent compiling: compile_s / (compile_s + N x step)."""
    if planned_steps < 1:
        raise ValueError(f"planned_steps must be >= 1, got {planned_steps}")
    total = compile_s + planned_steps * step_s
    return compile_s / total if total > 0 else 0.0


def _facts(result: dict, planned_steps: int | None) -> StepFacts:
    cfg = result.get("config") or {}
    batch, model = cfg.get("batch", {}), cfg.get("model", {})
    frac, step_s = result["time_frac"], result["step_time_s"]["mean"]
    dev = result.get("device") or {}
    mb, ga = int(batch.get("micro_batch", 1)), int(batch.get("grad_accum", 1))
    ref = dev.get("ceiling_flops") or dev.get("peak_flops")
    tokens_micro = result["tokens_per_step"] / ga  # this process's micro-batch tokens
    compute_per_micro = frac["compute"] * step_s / ga
    device_per_micro = tokens_micro * result["flops_per_token"] / ref if ref else None
    efficiency = device_per_micro / compute_per_micro if ref and compute_per_micro > 0 else None
    compiled = (cfg.get("runtime", {}).get("compile", "none") or "none") != "none"
    ops = model.get("n_layer", 12) * (COMPILED_OPS_PER_BLOCK if compiled else EAGER_OPS_PER_BLOCK)
    dev_type = dev.get("type") or "cpu"
    host = (ops + OPS_OUTSIDE_BLOCKS) * HOST_OP_OVERHEAD_S.get(dev_type, HOST_OP_OVERHEAD_S["cuda"])
    # Dynamo's own counter; if it read 0 for a compiled run, fall back to warm-up's excess time.
    compile_s = result.get("compile_s") or 0.0
    if compiled and compile_s <= 0 and result.get("warmup_s"):
        warm_steps = cfg.get("trial", {}).get("warmup_steps", 1)
        compile_s = max(0.0, result["warmup_s"] - warm_steps * result["step_time_s"]["p50"])
    samples = result.get("device_samples") or {}
    sm = samples.get("sm_util_pct", {}).get("mean") if isinstance(samples, dict) else None
    return StepFacts(
        frac=frac,
        step_s=step_s,
        micro_batch=mb,
        grad_accum=ga,
        compute_per_micro_s=compute_per_micro,
        device_per_micro_s=device_per_micro,
        host_per_micro_s=host,
        efficiency=efficiency,
        compile_s=compile_s,
        planned_steps=planned_steps or int(cfg.get("train", {}).get("max_steps", 1000)),
        device_type=dev_type,
        sm_util_pct=sm,
    )


def diagnose(result: dict, *, planned_steps: int | None = None) -> Diagnosis:
    """Classify a trial result; `planned_steps` (default: config train.max_steps) sizes compile."""
    if result.get("status") == "failed" or not result.get("time_frac"):
        failure = result.get("failure") or {}
        return Diagnosis(
            verdict="failed",
            numbers={"failure_kind": failure.get("kind", "unknown")},
            evidence={"failure": failure},
            fixes=[],
        )
    f = _facts(result, planned_steps)
    share_compile = compile_share(
        compile_s=f.compile_s, step_s=f.step_s, planned_steps=f.planned_steps
    )
    evidence = _evidence(result, f, share_compile)
    measured = {
        "data-bound": (f.frac["data_wait"], DATA_BOUND_MIN_FRAC),
        "checkpoint-bound": (f.frac["checkpoint"], CHECKPOINT_BOUND_MIN_FRAC),
        "compile-dominated": (share_compile, COMPILE_DOMINATED_MIN_FRAC),
    }
    if "comms" in f.frac:  # only multi-process results carry it
        measured["comms-bound"] = (f.frac["comms"], COMMS_BOUND_MIN_FRAC)
    crossed = sorted(
        (v for v, (s, t) in measured.items() if s >= t), key=lambda v: measured[v][0], reverse=True
    )
    host, host_why = _host_signal(f)
    if host:
        crossed.append("host-bound")
    verdict = crossed[0] if crossed else "compute-bound"
    numbers, fixes = verdict_fixes(verdict, result, f, share_compile)
    attribution = {k: v * f.step_s for k, v in f.frac.items()}
    attribution.update(warmup_s=result.get("warmup_s"), compile_s=f.compile_s)
    return Diagnosis(
        verdict=verdict,
        numbers=numbers,
        evidence=evidence,
        fixes=fixes,
        attribution_s=attribution,
        secondary=crossed[1:],
        host_signal=host_why,
    )


def _evidence(result: dict, f: StepFacts, share_compile: float) -> dict[str, Any]:
    return {
        "time_frac": dict(f.frac),
        "step_time_s_mean": f.step_s,
        "tokens_per_s": result.get("tokens_per_s"),
        "mfu_spec": (result.get("mfu") or {}).get("spec"),
        "mfu_ceiling": (result.get("mfu") or {}).get("ceiling"),
        "compute_efficiency_vs_ceiling": f.efficiency,
        "compute_per_micro_step_s": f.compute_per_micro_s,
        "math_per_micro_step_at_ceiling_s": f.device_per_micro_s,
        "launch_per_micro_step_estimate_s": f.host_per_micro_s,
        "compile_s": f.compile_s,
        "compile_share_of_planned_run": share_compile,
        "planned_steps": f.planned_steps,
        "device_samples": result.get("device_samples"),
        "comms": f.frac.get("comms", "n/a: no comms fraction in this result (single process)"),
    }


def _host_signal(f: StepFacts) -> tuple[bool, dict[str, Any]]:
    """Whether the step is host/launch-bound, and the signal that says so with its numbers."""
    slow = f.efficiency is not None and f.efficiency < HOST_MAX_COMPUTE_EFFICIENCY
    if f.frac["other"] >= HOST_OTHER_MIN_FRAC:
        return True, {"signal": "untimed_other", "other": f.frac["other"]}
    if f.sm_util_pct is not None:
        idle = f.sm_util_pct < HOST_MAX_SM_UTIL_PCT
        why = {"signal": "gpu_busy", "sm_util_pct": f.sm_util_pct, "max": HOST_MAX_SM_UTIL_PCT}
        return idle and slow, why
    if f.device_per_micro_s is None:
        return False, {"signal": "no_reference"}
    launch = f.host_per_micro_s >= f.device_per_micro_s
    why = {
        "signal": "launch_vs_math",
        "launch_s": f.host_per_micro_s,
        "math_at_ceiling_s": f.device_per_micro_s,
    }
    return launch and slow, why
