"""The bottleneck verdict of one trial result: pure classification and expected gain of each fix.

`diagnose(result)` reads a trial result (schema in train/core/result.py) and names where the step
time goes: data-bound, checkpoint-bound, comms-bound, compile-dominated, host/launch-bound or
compute-bound. The shares that can be measured (data wait, checkpoint stall, comms, compile over a
planned run) are checked first against their thresholds and the largest wins; host/launch-bound is
inferred next; compute-bound is what remains. Every fix carries an expected gain computed from the
result's own numbers ("up to", an Amdahl bound), never a canned sentence.

Host/launch-bound signal. Eager PyTorch pays a fixed host cost per op (Python, dispatcher, autograd,
kernel launch) that does not grow with the micro-batch. A step is host-bound when that cost
exceeds the math: on CUDA with telemetry, the GPU is idle much of the time (low `sm_util_pct`)
while the compute phase reaches under half the matmul ceiling; everywhere, when the estimated
per-micro-step launch time (ops x per-op overhead) exceeds the micro-step's FLOPs at the measured
matmul ceiling, and the compute phase again runs under half that ceiling; or when the untimed
`other` share (syncs, Python between phases) is large.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from train.core.compute_levers import amdahl, precision_levers, recompute_levers
from train.core.flops import lookup_peak

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
# Host cost per eager op, order of magnitude: ~5 us per CUDA kernel launch, ~10 us per CPU op
# through Python, dispatcher and autograd (PyTorch CUDA Graphs blog, 2021; our tiny-model timings).
HOST_OP_OVERHEAD_S = {"cpu": 10e-6, "cuda": 5e-6}
# Ops per GPT-2 block forward+backward: ~20 forward (2 LayerNorms, 4 Linears, split/views, SDPA,
# GELU, 2 adds), ~2x that backward; compile fuses the pointwise ones; plus embeddings, head, loss.
EAGER_OPS_PER_BLOCK = 60
COMPILED_OPS_PER_BLOCK = 15
OPS_OUTSIDE_BLOCKS = 20
# Host-memory copy rate for an async checkpoint's snapshot (device->pinned host on CUDA, memcpy on
# CPU); a conservative single-stream figure, used only to bound what async can recover.
SNAPSHOT_BYTES_PER_S = {"cpu": 5e9, "cuda": 10e9}
# A compile share below this is considered amortised when sizing a run.
COMPILE_AMORTISED_FRAC = 0.10

VERDICTS = (
    "failed",
    "data-bound",
    "checkpoint-bound",
    "comms-bound",
    "compile-dominated",
    "host-bound",
    "compute-bound",
)


@dataclass(frozen=True, kw_only=True)
class Fix:
    """A change to try and what it can give. `changes` is the decision: the dotted trainer keys it
    sets and their values ({} for an action beyond the config); `fix` says it for a reader."""

    changes: dict[str, Any]
    fix: str  # the change as shown: the overrides, or an action in words
    expected_gain: float | None  # tokens/s (or wall-time) multiplier, upper bound; None: unknown
    basis: str  # how the gain was computed


def override_text(changes: dict[str, Any]) -> str:
    """`changes` as the command line writes them: `batch.micro_batch=16 batch.grad_accum=4`."""
    return " ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changes.items()
    )


def setting(changes: dict[str, Any], gain: float | None, basis: str, *, note: str = "") -> Fix:
    """A fix that sets `changes`, shown as their overrides (and `note` after them)."""
    text = override_text(changes)
    return Fix(
        changes=changes, fix=f"{text} {note}" if note else text, expected_gain=gain, basis=basis
    )


def action(fix: str, gain: float | None, basis: str) -> Fix:
    """A fix no config key expresses (faster storage, a longer run, fewer host syncs)."""
    return Fix(changes={}, fix=fix, expected_gain=gain, basis=basis)


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """The verdict, the sentence that states it, the numbers behind it and what to do."""

    # One of VERDICTS.
    verdict: str
    # One sentence with the deciding number.
    headline: str
    # Fractions, MFU, efficiencies, device samples: the numbers the verdict rests on.
    evidence: dict[str, Any]
    # Fixes, most promising first.
    fixes: list[Fix]
    # Seconds per measured step by phase (mean step), warm-up and compile reported beside them.
    attribution_s: dict[str, float | None] = field(default_factory=dict)
    # Other thresholds that were also crossed (secondary bottlenecks).
    secondary: list[str] = field(default_factory=list)


def compile_share(*, compile_s: float, step_s: float, planned_steps: int) -> float:
    """Share of a planned run's wall time spent compiling: compile_s / (compile_s + N x step)."""
    if planned_steps < 1:
        raise ValueError(f"planned_steps must be >= 1, got {planned_steps}")
    total = compile_s + planned_steps * step_s
    return compile_s / total if total > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class _Facts:
    """The numbers every rule reads, pulled once from the result."""

    frac: dict[str, float]
    step_s: float
    micro_batch: int
    grad_accum: int
    compute_per_micro_s: float
    device_per_micro_s: float | None  # the micro-step's FLOPs at the ceiling (or peak)
    host_per_micro_s: float  # estimated launch/dispatch time of one micro-step
    efficiency: float | None  # compute-phase FLOP/s over the ceiling (or peak)
    compile_s: float
    planned_steps: int
    device_type: str
    sm_util_pct: float | None


def _facts(result: dict, planned_steps: int | None) -> _Facts:
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
    return _Facts(
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
            headline=f"no verdict: the trial failed ({failure.get('kind', 'unknown')}) and "
            "measured nothing",
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
    rules = {
        "data-bound": _data_bound,
        "checkpoint-bound": _checkpoint_bound,
        "comms-bound": _comms_bound,
        "compile-dominated": _compile_dominated,
        "host-bound": _host_bound,
        "compute-bound": _compute_bound,
    }
    evidence["host_signal"] = host_why
    headline, fixes = rules[verdict](result, f, share_compile)
    attribution = {k: v * f.step_s for k, v in f.frac.items()}
    attribution.update(warmup_s=result.get("warmup_s"), compile_s=f.compile_s)
    return Diagnosis(
        verdict=verdict,
        headline=headline,
        evidence=evidence,
        fixes=fixes,
        attribution_s=attribution,
        secondary=crossed[1:],
    )


def _evidence(result: dict, f: _Facts, share_compile: float) -> dict[str, Any]:
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


def _host_signal(f: _Facts) -> tuple[bool, str]:
    slow = f.efficiency is not None and f.efficiency < HOST_MAX_COMPUTE_EFFICIENCY
    if f.frac["other"] >= HOST_OTHER_MIN_FRAC:
        return True, f"untimed 'other' is {f.frac['other']:.0%} of the step (syncs, Python)"
    if f.sm_util_pct is not None:
        idle = f.sm_util_pct < HOST_MAX_SM_UTIL_PCT
        why = f"GPU busy {f.sm_util_pct:.0f}% of the time (threshold {HOST_MAX_SM_UTIL_PCT:.0f}%)"
        return idle and slow, why
    if f.device_per_micro_s is None:
        return False, "no ceiling or peak to size the math against"
    launch = f.host_per_micro_s >= f.device_per_micro_s
    why = (
        f"estimated launch time per micro-step {f.host_per_micro_s * 1e3:.2f} ms vs its math at "
        f"the ceiling {f.device_per_micro_s * 1e3:.2f} ms"
    )
    return launch and slow, why


# -- the rules: (headline, fixes) ---------------------------------------------------------------


def _data_bound(result: dict, f: _Facts, _: float) -> tuple[str, list[Fix]]:
    share = f.frac["data_wait"]
    gain = amdahl(share, math.inf)
    workers = int((result.get("config") or {}).get("data", {}).get("num_workers", 0))
    per_batch = f.step_s / f.grad_accum  # one micro-batch consumed per this interval
    wait = share * per_batch
    busy = per_batch - wait  # time the consumer spends on other work per batch
    load = wait if workers == 0 else workers * per_batch  # one batch's load time, estimated
    need = max(1, math.ceil(load / busy)) if busy > 0 else workers + 1
    fixes = [
        setting(
            {"data.num_workers": max(need, workers + 1)},
            gain,
            f"a batch takes ~{load * 1e3:.0f} ms to load vs {busy * 1e3:.0f} ms of work per "
            f"batch, so ~{need} workers hide it; removing a {share:.0%} wait gives "
            f"1/(1-{share:.2f})",
        ),
        Fix(
            changes={"data.prefetch_factor": 4, "data.pin_memory": True},
            fix="data.prefetch_factor=4 and data.pin_memory=true (CUDA)",
            expected_gain=gain,
            basis="absorbs jitter in load time; bounded by the same removed wait",
        ),
        # two formats and a storage move: no single config value
        action(
            "pre-tokenised memmap (data.format=nanogpt|llmc) on faster storage (local NVMe, "
            "/dev/shm)",
            gain,
            f"shrinks the {load * 1e3:.0f} ms per-batch load itself",
        ),
    ]
    return (
        f"data-bound: the step waits for data {share:.0%} of the time; removing the wait "
        f"gives up to {gain:.2f}x tokens/s"
    ), fixes


def _checkpoint_bound(result: dict, f: _Facts, _: float) -> tuple[str, list[Fix]]:
    share = f.frac["checkpoint"]
    ck = (result.get("config") or {}).get("checkpoint", {})
    every, mode = int(ck.get("every_steps", 1) or 1), ck.get("mode", "sync")
    stalls = result.get("checkpoint_s") or [share * f.step_s * every]
    stall = sum(stalls) / len(stalls)
    size = result.get("checkpoint_bytes")
    copy_rate = SNAPSHOT_BYTES_PER_S.get(f.device_type, SNAPSHOT_BYTES_PER_S["cpu"])
    snapshot = size / copy_rate if size else 0.0
    per_step = share * f.step_s  # checkpoint seconds per measured step
    between = every * (f.step_s - per_step)  # training time between two saves
    fixes = []
    if mode == "sync":
        # async: the caller pays the snapshot, plus any part of the write not hidden by training
        left = snapshot + max(0.0, stall - snapshot - between)
        recovered = max(0.0, per_step - left / every) / f.step_s
        gain = 1.0 / (1.0 - recovered) if recovered < 1 else math.inf
        fixes.append(
            setting(
                {"checkpoint.mode": "async"},
                gain,
                f"recovers up to {recovered:.0%} of the step: the {share:.0%} "
                f"checkpoint share minus the ~{snapshot * 1e3:.0f} ms snapshot copy "
                f"({(size or 0) / 1e9:.2f} GB at {copy_rate / 1e9:.0f} GB/s)",
            )
        )
    fixes.append(
        setting(
            {"checkpoint.every_steps": 10 * every},
            amdahl(share, 10.0),
            f"a tenth as many saves: the {share:.0%} share becomes {share / 10:.1%}",
        )
    )
    rate = f" (measured {size / stall / 1e9:.2f} GB/s)" if size and stall > 0 else ""
    fixes.append(
        action(
            "a 2x faster checkpoint.dir target (local NVMe, /dev/shm)",
            amdahl(share, 2.0),
            f"halves the {stall:.2f} s stall per save{rate}",
        )
    )
    return (
        f"checkpoint-bound: saving stalls the step {share:.0%} of the time ({stall:.2f} s per "
        f"save every {every} step(s), {mode})"
    ), fixes


def _comms_bound(result: dict, f: _Facts, _: float) -> tuple[str, list[Fix]]:
    share = f.frac["comms"]
    return (f"comms-bound: gradient communication is {share:.0%} of the step"), [
        action(
            "overlap all-reduce with backward (DDP buckets, bucket_cap_mb) or raise grad_accum",
            amdahl(share, math.inf),
            f"hiding the {share:.0%} comms share gives 1/(1-{share:.2f})",
        ),
    ]


def _compile_dominated(result: dict, f: _Facts, share: float) -> tuple[str, list[Fix]]:
    n, c = f.planned_steps, f.compile_s
    need = math.ceil(c * (1 - COMPILE_AMORTISED_FRAC) / (COMPILE_AMORTISED_FRAC * f.step_s))
    breakeven = c / (n * f.step_s)
    fixes = [
        action(
            f"plan >= {need:,} steps (compile under {COMPILE_AMORTISED_FRAC:.0%} of the run)",
            None,
            f"{c:.1f} s of compile over {n:,} steps of {f.step_s:.3g} s is {share:.0%}",
        ),
        action(
            "rerun with a warm compile cache (same torch, same shapes)",
            amdahl(share, math.inf),
            f"the {share:.0%} compile share of wall time, 1/(1-{share:.2f})",
        ),
    ]
    if ((result.get("config") or {}).get("runtime") or {}).get("compile_unit", "model") == "model":
        fixes.append(
            setting(
                {"runtime.compile_unit": "block"},
                None,
                "each transformer block compiled once and reused: a cold compile of "
                "a few layers' worth at any depth (docs/bench/compile_unit-2026-11-27"
                "-cpu.txt); the step may lose a few %: compare the two trials",
            )
        )
    fixes += [
        setting(
            {"runtime.compile": "none"},
            amdahl(share, math.inf),
            f"wins only if eager steps are under {1 + breakeven:.2f}x the compiled step "
            f"(compile_s / (N x step) = {breakeven:.2f}); compare the two trials",
        ),
    ]
    return (
        f"compile-dominated: {c:.1f} s of compile is {share:.0%} of a {n:,}-step run "
        "(warm-up is excluded from the step numbers)"
    ), fixes


def _host_bound(result: dict, f: _Facts, _: float) -> tuple[str, list[Fix]]:
    c = f.frac["compute"]
    fixed = max(0.0, f.compute_per_micro_s - (f.device_per_micro_s or 0.0))
    k = f.grad_accum  # the largest micro-batch keeping tokens per step: grad_accum=1
    fixes = []
    if k > 1:
        after = fixed / k + (f.device_per_micro_s or 0.0)
        g = amdahl(c, f.compute_per_micro_s / after) if after > 0 else None
        fixes.append(
            setting(
                {"batch.micro_batch": f.micro_batch * k, "batch.grad_accum": 1},
                g,
                f"{k} fewer launches per step amortise ~{fixed * 1e3:.2f} ms of "
                "fixed cost per micro-step (memory permitting)",
            )
        )
    if f.device_type == "cuda" and f.device_per_micro_s:
        g = amdahl(c, f.compute_per_micro_s / f.device_per_micro_s)
        fixes.append(
            setting(
                {"runtime.compile": "reduce-overhead"},
                g,
                "replays the step's launches as one graph; bound: math at the ceiling",
                note="(CUDA graphs; needs grad_accum=1)",
            )
        )
    else:
        fixes.append(
            setting(
                {"runtime.compile": "default"},
                None,
                f"fuses ~{EAGER_OPS_PER_BLOCK // COMPILED_OPS_PER_BLOCK}x fewer ops "
                "per block; measure, compile time counts",
            )
        )
    other = f.frac["other"]
    if other > 0.05:
        fixes.append(
            action(
                "fewer host syncs (.item(), prints) per step",
                amdahl(other, math.inf),
                f"the untimed {other:.0%} 'other' share",
            )
        )
    eff = f"{f.efficiency:.0%}" if f.efficiency is not None else "n/a"
    return (
        f"host/launch-bound: per-op overhead outweighs the math ({eff} of the matmul ceiling "
        "in the compute phase)"
    ), fixes


def _compute_bound(result: dict, f: _Facts, _: float) -> tuple[str, list[Fix]]:
    c = f.frac["compute"]
    cfg = result.get("config") or {}
    rt = cfg.get("runtime", {})
    mfu = result.get("mfu") or {}
    headroom = amdahl(c, 1.0 / f.efficiency) if f.efficiency else None
    basis = (
        f"compute phase at {f.efficiency:.0%} of the matmul ceiling; reaching it gives this bound"
        if f.efficiency
        else "no ceiling measured"
    )
    fixes = []
    if (rt.get("compile") or "none") == "none":
        fixes.append(setting({"runtime.compile": "default"}, headroom, basis))
    dtype = (result.get("device") or {}).get("dtype")
    if dtype == "fp32":
        fixes.append(
            setting(
                {"runtime.dtype": "bf16"},
                _precision_gain(result, c),
                "bf16 over fp32/TF32 datasheet peak ratio on this device",
            )
        )
    if f.grad_accum > 1:
        fixes.append(
            setting(
                {
                    "batch.micro_batch": 2 * f.micro_batch,
                    "batch.grad_accum": max(1, f.grad_accum // 2),
                },
                headroom,
                "larger matmuls run nearer the ceiling (memory permitting); " + basis,
            )
        )
    if result.get("attention_backend") == "math" and f.device_type == "cuda":
        fixes.append(setting({"runtime.attention": "flash"}, headroom, basis))
    compile_mode = rt.get("compile") or "none"
    if compile_mode in ("default", "reduce-overhead"):
        fixes.append(
            setting(
                {"runtime.compile": "max-autotune-no-cudagraphs"},
                headroom,
                "autotuned matmul and fused kernels; " + basis,
            )
        )
    elif compile_mode != "none":  # already autotuned: what is left is not a knob here
        fixes.append(
            action(
                "faster kernels (fused attention, hand-written kernels)",
                headroom,
                f"runtime.compile={compile_mode} already autotunes; " + basis,
            )
        )
    # the levers of a compute-bound step (issue 22) that apply here: recompute, float8, FA3
    levers = recompute_levers(result, c) + precision_levers(result, c)
    fixes += [setting(changes, gain, why) for changes, gain, why in levers]
    spec = f"{mfu['spec']:.0%} MFU" if mfu.get("spec") is not None else "no spec MFU (no peak)"
    if mfu.get("spec") is not None and result.get("float8"):
        spec += " (bf16-equivalent: float8 matmuls ran)"
    return (
        f"compute-bound: forward/backward is {c:.0%} of the step at {spec}"
        + (f", {f.efficiency:.0%} of the matmul ceiling" if f.efficiency else "")
    ), fixes


def _precision_gain(result: dict, share: float) -> float | None:
    dev = result.get("device") or {}
    if dev.get("type") != "cuda":
        return None  # no datasheet peaks for CPUs
    name = dev.get("name") or ""
    tf32 = bool((result.get("config") or {}).get("runtime", {}).get("tf32", True))
    now, bf16 = lookup_peak(name, "fp32", tf32=tf32), lookup_peak(name, "bf16")
    return amdahl(share, bf16.flops / now.flops) if now and bf16 else None
