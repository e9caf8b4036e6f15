"""What to do about each bottleneck verdict of train/core/diagnosis.py: the headline that states
the verdict with its deciding number, and its fixes, most promising first. Every fix carries an
expected gain computed from the result's own numbers ("up to", an Amdahl bound) and the basis it
rests on, never a canned sentence; a fix's `changes` are the trainer keys it sets. Pure and
torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from train.core.compute_levers import amdahl, precision_levers, recompute_levers
from train.core.flops import lookup_peak

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
class StepFacts:
    """The numbers every rule reads, pulled once from the result (train/core/diagnosis.py)."""

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


def verdict_fixes(
    verdict: str, result: dict, f: StepFacts, share_compile: float
) -> tuple[str, list[Fix]]:
    """The headline of `verdict` (one of diagnosis.VERDICTS but "failed") and its fixes, most
    promising first; `share_compile` is the compile share of the planned run."""
    return _RULES[verdict](result, f, share_compile)


# -- the rules: (headline, fixes) ---------------------------------------------------------------


def _data_bound(result: dict, f: StepFacts, _: float) -> tuple[str, list[Fix]]:
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


def _checkpoint_bound(result: dict, f: StepFacts, _: float) -> tuple[str, list[Fix]]:
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


def _comms_bound(result: dict, f: StepFacts, _: float) -> tuple[str, list[Fix]]:
    share = f.frac["comms"]
    return (f"comms-bound: gradient communication is {share:.0%} of the step"), [
        action(
            "overlap all-reduce with backward (DDP buckets, bucket_cap_mb) or raise grad_accum",
            amdahl(share, math.inf),
            f"hiding the {share:.0%} comms share gives 1/(1-{share:.2f})",
        ),
    ]


def _compile_dominated(result: dict, f: StepFacts, share: float) -> tuple[str, list[Fix]]:
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


def _host_bound(result: dict, f: StepFacts, _: float) -> tuple[str, list[Fix]]:
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


def _compute_bound(result: dict, f: StepFacts, _: float) -> tuple[str, list[Fix]]:
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


_RULES: dict[str, Callable[[dict, StepFacts, float], tuple[str, list[Fix]]]] = {
    "data-bound": _data_bound,
    "checkpoint-bound": _checkpoint_bound,
    "comms-bound": _comms_bound,
    "compile-dominated": _compile_dominated,
    "host-bound": _host_bound,
    "compute-bound": _compute_bound,
}
