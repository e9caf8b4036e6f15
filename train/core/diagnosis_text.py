"""Every sentence of a bottleneck diagnosis: the verdict's headline, the host signal, each fix as
shown and the basis of its gain, and what a sweep measured of a fix. The one writer both the
sweep's story (sweeper/report/story.py) and `python -m train.explain` use; the domain
(train/core/diagnosis.py, bottleneck_fixes.py, compute_levers.py, evidence.py) returns data: kinds
and the numbers they were decided by. Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from train.core.bottleneck_fixes import Fix
from train.core.diagnosis import Diagnosis
from train.core.evidence import Measured

# float8 training's published end-to-end gains (compute_levers.FLOAT8_TENSORWISE_EVIDENCE's source)
FLOAT8_EVIDENCE = (
    "public evidence, not measured here: nanochat d26 (MLP 1664x6656, close to "
    "XL's 1600x6400) 1.17x tensorwise, 0.90x rowwise; torchao docs +25% "
    "tensorwise / +10% rowwise and torchtitan +28% on Llama3-8B, H100"
)


def override_text(changes: Mapping[str, Any]) -> str:
    """`changes` as the command line writes them: `batch.micro_batch=16 batch.grad_accum=4`."""
    return " ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in changes.items()
    )


# -- the verdict ----------------------------------------------------------------------------------


def headline_text(d: Diagnosis) -> str:
    """The one sentence that states `d`'s verdict with its deciding number."""
    return _HEADLINES[d.verdict](d.numbers)


def _compute_headline(n: Mapping[str, Any]) -> str:
    spec = f"{n['mfu_spec']:.0%} MFU" if n["mfu_spec"] is not None else "no spec MFU (no peak)"
    if n["mfu_spec"] is not None and n["float8"]:
        spec += " (bf16-equivalent: float8 matmuls ran)"
    eff = f", {n['efficiency']:.0%} of the matmul ceiling" if n["efficiency"] else ""
    return f"compute-bound: forward/backward is {n['compute_share']:.0%} of the step at {spec}{eff}"


def _host_headline(n: Mapping[str, Any]) -> str:
    eff = f"{n['efficiency']:.0%}" if n["efficiency"] is not None else "n/a"
    return (
        f"host/launch-bound: per-op overhead outweighs the math ({eff} of the matmul ceiling "
        "in the compute phase)"
    )


_HEADLINES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "failed": lambda n: f"no verdict: the trial failed ({n['failure_kind']}) and measured nothing",
    "data-bound": lambda n: (
        f"data-bound: the step waits for data {n['share']:.0%} of the time; removing the wait "
        f"gives up to {n['gain']:.2f}x tokens/s"
    ),
    "checkpoint-bound": lambda n: (
        f"checkpoint-bound: saving stalls the step {n['share']:.0%} of the time "
        f"({n['stall_s']:.2f} s per save every {n['every_steps']} step(s), {n['mode']})"
    ),
    "comms-bound": lambda n: f"comms-bound: gradient communication is {n['share']:.0%} of the step",
    "compile-dominated": lambda n: (
        f"compile-dominated: {n['compile_s']:.1f} s of compile is {n['share']:.0%} of a "
        f"{n['planned_steps']:,}-step run (warm-up is excluded from the step numbers)"
    ),
    "host-bound": _host_headline,
    "compute-bound": _compute_headline,
}


def host_signal_text(d: Diagnosis) -> str:
    """What the host/launch check read, with its numbers ("" for a failed trial)."""
    n = d.host_signal
    if not n:
        return ""
    if n["signal"] == "untimed_other":
        return f"untimed 'other' is {n['other']:.0%} of the step (syncs, Python)"
    if n["signal"] == "gpu_busy":
        return f"GPU busy {n['sm_util_pct']:.0f}% of the time (threshold {n['max']:.0f}%)"
    if n["signal"] == "no_reference":
        return "no ceiling or peak to size the math against"
    return (
        f"estimated launch time per micro-step {n['launch_s'] * 1e3:.2f} ms vs its math at "
        f"the ceiling {n['math_at_ceiling_s'] * 1e3:.2f} ms"
    )


# -- the fixes ------------------------------------------------------------------------------------


def fix_text(fix: Fix) -> str:
    """The change as shown: its overrides (and a note after them), or an action in words."""
    if fix.kind in _ACTIONS:
        return _ACTIONS[fix.kind](fix.numbers)
    text = override_text(fix.changes)
    return f"{text} {_NOTES[fix.kind]}" if fix.kind in _NOTES else text


def basis_text(fix: Fix) -> str:
    """How the fix's gain was computed, and what a sweep measured of it once judged."""
    text = _BASES[fix.kind](fix.numbers)
    return f"{text}; {evidence_text(fix.measured)}" if fix.measured is not None else text


def _ceiling_basis(n: Mapping[str, Any]) -> str:
    """The basis of a gain bounded by the compute phase reaching the matmul ceiling."""
    if not n["efficiency"]:
        return "no ceiling measured"
    return (
        f"compute phase at {n['efficiency']:.0%} of the matmul ceiling; reaching it gives this "
        "bound"
    )


def _recompute_basis(n: Mapping[str, Any]) -> str:
    return (
        f"arithmetic: {n['policy']} recomputes {n['recomputed']:.0%} of the blocks' forward "
        f"({n['flops_ratio']:.2f}x the FLOPs); up to this if it fits (plan mode's memory model "
        "says)"
    )


def _measured_rate(n: Mapping[str, Any]) -> str:
    rate = n["bytes_per_s"]
    return f" (measured {rate / 1e9:.2f} GB/s)" if rate is not None else ""


# Fixes shown in words: actions no config key expresses, and settings said as a phrase.
_ACTIONS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "data_prefetch": lambda n: "data.prefetch_factor=4 and data.pin_memory=true (CUDA)",
    "data_memmap": lambda n: (
        "pre-tokenised memmap (data.format=nanogpt|llmc) on faster storage (local NVMe, /dev/shm)"
    ),
    "checkpoint_storage": lambda n: "a 2x faster checkpoint.dir target (local NVMe, /dev/shm)",
    "comms_overlap": lambda n: (
        "overlap all-reduce with backward (DDP buckets, bucket_cap_mb) or raise grad_accum"
    ),
    "compile_longer_run": lambda n: (
        f"plan >= {n['need_steps']:,} steps (compile under {n['amortised_frac']:.0%} of the run)"
    ),
    "compile_warm_cache": lambda n: "rerun with a warm compile cache (same torch, same shapes)",
    "host_syncs": lambda n: "fewer host syncs (.item(), prints) per step",
    "compute_kernels": lambda n: "faster kernels (fused attention, hand-written kernels)",
}
# Settings shown with more than their overrides.
_NOTES = {"host_cuda_graphs": "(CUDA graphs; needs grad_accum=1)"}

_BASES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "data_workers": lambda n: (
        f"a batch takes ~{n['load_s'] * 1e3:.0f} ms to load vs {n['busy_s'] * 1e3:.0f} ms of "
        f"work per batch, so ~{n['need']} workers hide it; removing a {n['share']:.0%} wait "
        f"gives 1/(1-{n['share']:.2f})"
    ),
    "data_prefetch": lambda n: "absorbs jitter in load time; bounded by the same removed wait",
    "data_memmap": lambda n: f"shrinks the {n['load_s'] * 1e3:.0f} ms per-batch load itself",
    "checkpoint_async": lambda n: (
        f"recovers up to {n['recovered']:.0%} of the step: the {n['share']:.0%} checkpoint "
        f"share minus the ~{n['snapshot_s'] * 1e3:.0f} ms snapshot copy "
        f"({n['bytes'] / 1e9:.2f} GB at {n['copy_bytes_per_s'] / 1e9:.0f} GB/s)"
    ),
    "checkpoint_fewer": lambda n: (
        f"a tenth as many saves: the {n['share']:.0%} share becomes {n['share'] / 10:.1%}"
    ),
    "checkpoint_storage": lambda n: (
        f"halves the {n['stall_s']:.2f} s stall per save{_measured_rate(n)}"
    ),
    "comms_overlap": lambda n: (
        f"hiding the {n['share']:.0%} comms share gives 1/(1-{n['share']:.2f})"
    ),
    "compile_longer_run": lambda n: (
        f"{n['compile_s']:.1f} s of compile over {n['planned_steps']:,} steps of "
        f"{n['step_s']:.3g} s is {n['share']:.0%}"
    ),
    "compile_warm_cache": lambda n: (
        f"the {n['share']:.0%} compile share of wall time, 1/(1-{n['share']:.2f})"
    ),
    "compile_unit_block": lambda n: (
        "each transformer block compiled once and reused: a cold compile of a few layers' worth "
        "at any depth (docs/bench/compile_unit-2026-11-29-cpu.txt); the step may be slower where "
        "the host's work around each block's call adds to it (5-22% on a 2-core CPU): compare the "
        "two trials"
    ),
    "compile_off": lambda n: (
        f"wins only if eager steps are under {1 + n['breakeven']:.2f}x the compiled step "
        f"(compile_s / (N x step) = {n['breakeven']:.2f}); compare the two trials"
    ),
    "host_one_micro_step": lambda n: (
        f"{n['launches']} fewer launches per step amortise ~{n['fixed_s'] * 1e3:.2f} ms of fixed "
        "cost per micro-step (memory permitting)"
    ),
    "host_cuda_graphs": lambda n: (
        "replays the step's launches as one graph; bound: math at the ceiling"
    ),
    "host_compile": lambda n: (
        f"fuses ~{n['fewer_ops']}x fewer ops per block; measure, compile time counts"
    ),
    "host_syncs": lambda n: f"the untimed {n['other']:.0%} 'other' share",
    "compute_compile": _ceiling_basis,
    "compute_bf16": lambda n: "bf16 over fp32/TF32 datasheet peak ratio on this device",
    "compute_larger_micro": lambda n: (
        "larger matmuls run nearer the ceiling (memory permitting); " + _ceiling_basis(n)
    ),
    "compute_flash": _ceiling_basis,
    "compute_autotune": lambda n: "autotuned matmul and fused kernels; " + _ceiling_basis(n),
    "compute_kernels": lambda n: (
        f"runtime.compile={n['compile_mode']} already autotunes; " + _ceiling_basis(n)
    ),
    "keep_blocks": lambda n: _recompute_basis(n) + "; the chunked loss frees the logits' memory",
    "recompute_selective": lambda n: (
        _recompute_basis(n) + "; selective keeps the matmul and attention outputs and "
        "recomputes only pointwise ops, so nearly all of it"
    ),
    "float8": lambda n: FLOAT8_EVIDENCE + "; changes the math: the numerics guard checks it",
    "fa3": lambda n: (
        f"arithmetic on public evidence: attention is {n['attention_share']:.0%} of the FLOPs, "
        f"FA3 up to {n['speedup']:g}x FA2 there (Shah et al. 2024, H100); needs the "
        "flash_attn_interface package"
    ),
}


# -- what a sweep measured of a fix ---------------------------------------------------------------


def evidence_text(m: Measured) -> str:
    """The sentence both the sweep's `next:` lines and explain's fixes say of `m`."""
    if m.kind == "at_winner":
        text = (
            f"measured at the winner's other settings: {m.tokens_per_s:,.0f} tokens/s in the "
            f"search run of trial {m.trial}"
        )
        if m.ratio is not None:
            text += f", {m.ratio:.2f}x the winner's search run"
        return text + "; not verified"
    if m.kind == "raced_elsewhere":
        return (
            f"not measured at the winner's settings; at other settings trial {m.trial} "
            f"verified {m.tokens_per_s:,.0f} tokens/s (median, real full steps)"
        )
    if m.kind == "searched_elsewhere":
        return (
            f"not measured at the winner's settings; at other settings its best complete "
            f"search run was {m.tokens_per_s:,.0f} tokens/s (trial {m.trial})"
        )
    if m.kind == "pruned_elsewhere":
        return (
            "not measured at the winner's settings; at other settings only in pruned "
            "trials (stopped early: no full figure)"
        )
    if m.kind == "not_searched":
        return "not searched in this sweep"
    return "not measured in this sweep"
