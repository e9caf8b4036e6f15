"""What to do about each bottleneck verdict of train/core/diagnosis.py: the numbers that state
the verdict, and its fixes, most promising first. Every fix carries an expected gain computed from
the result's own numbers ("up to", an Amdahl bound) and the numbers it rests on; a fix's `changes`
are the trainer keys it sets. Pure and torch-free: data out; train/core/diagnosis_text.py writes
the sentences.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from train.core.compute_levers import amdahl, precision_levers, recompute_levers
from train.core.evidence import Measured
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


# Each fix's kind: the rule that suggested it. train/core/diagnosis_text.py says each one.
FixKind = Literal[
    "data_workers",
    "data_prefetch",
    "data_memmap",
    "checkpoint_async",
    "checkpoint_fewer",
    "checkpoint_storage",
    "comms_overlap",
    "compile_longer_run",
    "compile_warm_cache",
    "compile_unit_block",
    "compile_off",
    "host_one_micro_step",
    "host_cuda_graphs",
    "host_compile",
    "host_syncs",
    "compute_compile",
    "compute_bf16",
    "compute_larger_micro",
    "compute_flash",
    "compute_autotune",
    "compute_kernels",
    "keep_blocks",
    "recompute_selective",
    "float8",
    "fa3",
]


@dataclass(frozen=True, kw_only=True)
class Fix:
    """A change to try and what it can give. `changes` is the decision: the dotted trainer keys it
    sets and their values ({} for an action beyond the config); `kind` names the rule and
    `numbers` hold what its gain was computed from (train/core/diagnosis_text.py says both)."""

    kind: FixKind
    changes: dict[str, Any]
    expected_gain: float | None  # tokens/s (or wall-time) multiplier, upper bound; None: unknown
    numbers: dict[str, Any] = field(default_factory=dict)
    # What the sweep measured of it (train/core/evidence.py), once a sweep has judged it.
    measured: Measured | None = None


def suggest(
    kind: FixKind, gain: float | None, changes: dict[str, Any] | None = None, **numbers: Any
) -> Fix:
    """A fix of `kind` that sets `changes` (none: an action no config key expresses)."""
    return Fix(kind=kind, changes=changes or {}, expected_gain=gain, numbers=numbers)


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


Rule = tuple[dict[str, Any], list[Fix]]  # (the numbers that state the verdict, its fixes)


def verdict_fixes(verdict: str, result: dict, f: StepFacts, share_compile: float) -> Rule:
    """The numbers that state `verdict` (one of diagnosis.VERDICTS but "failed") and its fixes,
    most promising first; `share_compile` is the compile share of the planned run."""
    return _RULES[verdict](result, f, share_compile)


# -- the rules: (numbers, fixes) ----------------------------------------------------------------


def _data_bound(result: dict, f: StepFacts, _: float) -> Rule:
    share = f.frac["data_wait"]
    gain = amdahl(share, math.inf)
    workers = int((result.get("config") or {}).get("data", {}).get("num_workers", 0))
    per_batch = f.step_s / f.grad_accum  # one micro-batch consumed per this interval
    wait = share * per_batch
    busy = per_batch - wait  # time the consumer spends on other work per batch
    load = wait if workers == 0 else workers * per_batch  # one batch's load time, estimated
    need = max(1, math.ceil(load / busy)) if busy > 0 else workers + 1
    fixes = [
        suggest(
            "data_workers",
            gain,
            {"data.num_workers": max(need, workers + 1)},
            load_s=load,
            busy_s=busy,
            need=need,
            share=share,
        ),
        suggest("data_prefetch", gain, {"data.prefetch_factor": 4, "data.pin_memory": True}),
        # two formats and a storage move: no single config value
        suggest("data_memmap", gain, load_s=load),
    ]
    return {"share": share, "gain": gain}, fixes


def _checkpoint_bound(result: dict, f: StepFacts, _: float) -> Rule:
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
            suggest(
                "checkpoint_async",
                gain,
                {"checkpoint.mode": "async"},
                recovered=recovered,
                share=share,
                snapshot_s=snapshot,
                bytes=size or 0,
                copy_bytes_per_s=copy_rate,
            )
        )
    fixes.append(
        suggest(
            "checkpoint_fewer",
            amdahl(share, 10.0),
            {"checkpoint.every_steps": 10 * every},
            share=share,
        )
    )
    rate = size / stall if size and stall > 0 else None
    fixes.append(suggest("checkpoint_storage", amdahl(share, 2.0), stall_s=stall, bytes_per_s=rate))
    return {"share": share, "stall_s": stall, "every_steps": every, "mode": mode}, fixes


def _comms_bound(result: dict, f: StepFacts, _: float) -> Rule:
    share = f.frac["comms"]
    return {"share": share}, [suggest("comms_overlap", amdahl(share, math.inf), share=share)]


def _compile_dominated(result: dict, f: StepFacts, share: float) -> Rule:
    n, c = f.planned_steps, f.compile_s
    need = math.ceil(c * (1 - COMPILE_AMORTISED_FRAC) / (COMPILE_AMORTISED_FRAC * f.step_s))
    breakeven = c / (n * f.step_s)
    fixes = [
        suggest(
            "compile_longer_run",
            None,
            need_steps=need,
            amortised_frac=COMPILE_AMORTISED_FRAC,
            compile_s=c,
            planned_steps=n,
            step_s=f.step_s,
            share=share,
        ),
        suggest("compile_warm_cache", amdahl(share, math.inf), share=share),
    ]
    if ((result.get("config") or {}).get("runtime") or {}).get("compile_unit", "model") == "model":
        fixes.append(suggest("compile_unit_block", None, {"runtime.compile_unit": "block"}))
    fixes.append(
        suggest(
            "compile_off", amdahl(share, math.inf), {"runtime.compile": "none"}, breakeven=breakeven
        )
    )
    return {"compile_s": c, "share": share, "planned_steps": n}, fixes


def _host_bound(result: dict, f: StepFacts, _: float) -> Rule:
    c = f.frac["compute"]
    fixed = max(0.0, f.compute_per_micro_s - (f.device_per_micro_s or 0.0))
    k = f.grad_accum  # the largest micro-batch keeping tokens per step: grad_accum=1
    fixes = []
    if k > 1:
        after = fixed / k + (f.device_per_micro_s or 0.0)
        g = amdahl(c, f.compute_per_micro_s / after) if after > 0 else None
        fixes.append(
            suggest(
                "host_one_micro_step",
                g,
                {"batch.micro_batch": f.micro_batch * k, "batch.grad_accum": 1},
                launches=k,
                fixed_s=fixed,
            )
        )
    if f.device_type == "cuda" and f.device_per_micro_s:
        g = amdahl(c, f.compute_per_micro_s / f.device_per_micro_s)
        fixes.append(suggest("host_cuda_graphs", g, {"runtime.compile": "reduce-overhead"}))
    else:
        fewer = EAGER_OPS_PER_BLOCK // COMPILED_OPS_PER_BLOCK
        fixes.append(suggest("host_compile", None, {"runtime.compile": "default"}, fewer_ops=fewer))
    other = f.frac["other"]
    if other > 0.05:
        fixes.append(suggest("host_syncs", amdahl(other, math.inf), other=other))
    return {"efficiency": f.efficiency}, fixes


def _compute_bound(result: dict, f: StepFacts, _: float) -> Rule:
    c = f.frac["compute"]
    cfg = result.get("config") or {}
    rt = cfg.get("runtime", {})
    mfu = result.get("mfu") or {}
    headroom = amdahl(c, 1.0 / f.efficiency) if f.efficiency else None
    eff = f.efficiency or None  # the basis of every headroom gain: no ceiling, no bound
    fixes = []
    if (rt.get("compile") or "none") == "none":
        fixes.append(
            suggest("compute_compile", headroom, {"runtime.compile": "default"}, efficiency=eff)
        )
    dtype = (result.get("device") or {}).get("dtype")
    if dtype == "fp32":
        fixes.append(suggest("compute_bf16", _precision_gain(result, c), {"runtime.dtype": "bf16"}))
    if f.grad_accum > 1:
        larger = {
            "batch.micro_batch": 2 * f.micro_batch,
            "batch.grad_accum": max(1, f.grad_accum // 2),
        }
        fixes.append(suggest("compute_larger_micro", headroom, larger, efficiency=eff))
    if result.get("attention_backend") == "math" and f.device_type == "cuda":
        fixes.append(
            suggest("compute_flash", headroom, {"runtime.attention": "flash"}, efficiency=eff)
        )
    compile_mode = rt.get("compile") or "none"
    if compile_mode in ("default", "reduce-overhead"):
        autotune = {"runtime.compile": "max-autotune-no-cudagraphs"}
        fixes.append(suggest("compute_autotune", headroom, autotune, efficiency=eff))
    elif compile_mode != "none":  # already autotuned: what is left is not a knob here
        fixes.append(
            suggest("compute_kernels", headroom, compile_mode=compile_mode, efficiency=eff)
        )
    # the levers of a compute-bound step (issue 22) that apply here: recompute, float8, FA3
    levers = recompute_levers(result, c) + precision_levers(result, c)
    fixes += [
        Fix(kind=kind, changes=changes, expected_gain=gain, numbers=numbers)
        for kind, changes, gain, numbers in levers
    ]
    numbers = {
        "compute_share": c,
        "mfu_spec": mfu.get("spec"),
        "float8": bool(result.get("float8")),
        "efficiency": eff,
    }
    return numbers, fixes


def _precision_gain(result: dict, share: float) -> float | None:
    dev = result.get("device") or {}
    if dev.get("type") != "cuda":
        return None  # no datasheet peaks for CPUs
    name = dev.get("name") or ""
    tf32 = bool((result.get("config") or {}).get("runtime", {}).get("tf32", True))
    now, bf16 = lookup_peak(name, "fp32", tf32=tf32), lookup_peak(name, "bf16")
    return amdahl(share, bf16.flops / now.flops) if now and bf16 else None


_RULES: dict[str, Callable[[dict, StepFacts, float], Rule]] = {
    "data-bound": _data_bound,
    "checkpoint-bound": _checkpoint_bound,
    "comms-bound": _comms_bound,
    "compile-dominated": _compile_dominated,
    "host-bound": _host_bound,
    "compute-bound": _compute_bound,
}
