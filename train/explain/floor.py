"""The physical floor of one training step: pure arithmetic, no run needed.

Given a model shape, a batch split, a device and a dtype, this says how many FLOPs one optimizer
step is, how long it would take at 100% of the device's dense datasheet peak (the floor no tuning
can beat), how long at a measured matmul ceiling, what MFU a measured step time means, what
nanoGPT's A100-based estimate would print for the same run, and whether a target step time is
physically possible. `python -m train.explain` prints it; tests check it against hand arithmetic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from train.core.chips import chip_for
from train.core.flops import (
    NANOGPT_PROMISED_FLOPS,
    floor_step_time_s,
    flops_per_token_of,
    gpt2_num_params,
    nanogpt_reported_mfu,
)
from train.core.rules import FLOAT8_MIN_CAPABILITY

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class FloorInputs:
    """Everything the floor arithmetic needs; the caller resolves the peak (flops.lookup_peak)."""

    # Model preset name, for the report only.
    model: str
    # Transformer blocks.
    n_layer: int
    # Attention heads per block.
    n_head: int
    # Residual stream width.
    n_embd: int
    # Vocabulary size (padded, as the model is built).
    vocab_size: int
    # Sequence length trained on (our trainer and nanoGPT both use block_size).
    block_size: int
    # Sequences per forward/backward pass on one device.
    micro_batch: int
    # Forward/backward passes per optimizer step, per process.
    grad_accum: int
    # Processes (devices) sharing one optimizer step.
    world_size: int = 1
    # Device name as torch.cuda.get_device_name spells it (or "cpu").
    device_name: str
    # Compute dtype: bf16 | fp16 | tf32 | fp32.
    dtype: str
    # Dense datasheet peak FLOP/s per device for this dtype, None when unknown.
    peak_flops: float | None = None
    # Where peak_flops comes from.
    peak_source: str | None = None
    # Measured (or user-given) matmul ceiling FLOP/s per device, None when unknown.
    ceiling_flops: float | None = None
    # Where ceiling_flops comes from (a cached measurement, a flag).
    ceiling_source: str | None = None
    # Measured optimizer-step time in seconds, None for a pure what-if.
    step_time_s: float | None = None
    # The step time someone expects, checked against the floor.
    target_step_time_s: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "n_layer",
            "n_head",
            "n_embd",
            "vocab_size",
            "block_size",
            "micro_batch",
            "grad_accum",
            "world_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head}); "
                "pick a head count that divides the width"
            )
        for name in ("peak_flops", "ceiling_flops", "step_time_s", "target_step_time_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 (or left out), got {value!r}")


@dataclass(frozen=True, kw_only=True)
class FloorReport:
    """The numbers, flat, so `--format json` and the text report say the same thing."""

    inputs: FloorInputs
    # Parameters counted in 6N (position embedding excluded, as nanoGPT's get_num_params).
    num_params: int
    # Tokens per optimizer step on one device, and over all processes.
    tokens_per_step_per_device: int
    tokens_per_step: int
    # Training FLOPs per token (6N + 12·L·H·Q·T) and per step (per device and all processes).
    flops_per_token: float
    flops_per_step_per_device: float
    flops_per_step: float
    # Step time at 100% of the datasheet peak; None without a peak.
    floor_s: float | None
    # Step time at the matmul ceiling; None without one.
    ceiling_floor_s: float | None
    # Achieved tokens/s (all processes), model FLOP/s per device and MFU; None without a step time.
    tokens_per_s: float | None
    achieved_flops_per_device: float | None
    mfu_spec: float | None
    mfu_ceiling: float | None
    # What nanoGPT's estimate_mfu would print for this step time (per process, A100 denominator).
    nanogpt_mfu: float | None
    # nanoGPT's number over ours: exactly peak / 312 TFLOP/s when both count the same FLOPs.
    nanogpt_over_mfu: float | None
    # MFU a target step time would need (floor / target), and whether it is under 100%.
    target_mfu_needed: float | None
    target_possible: bool | None
    # Sentences for the reader: impossibility, unknown peaks, the nanoGPT difference.
    notes: list[str] = field(default_factory=list)


def floor_report(inp: FloorInputs) -> FloorReport:
    """Compute every number of the report from the inputs (no I/O, no torch)."""
    n = gpt2_num_params(
        n_layer=inp.n_layer, n_embd=inp.n_embd, vocab_size=inp.vocab_size, block_size=inp.block_size
    )
    fpt = flops_per_token_of(inp, num_params=n)
    tokens_dev = inp.micro_batch * inp.grad_accum * inp.block_size
    flops_dev = fpt * tokens_dev
    floor_s = ceiling_floor_s = None
    if inp.peak_flops:
        floor_s = floor_step_time_s(
            tokens_per_step=tokens_dev, flops_per_token=fpt, peak_flops=inp.peak_flops
        )
    if inp.ceiling_flops:  # the same floor at the rate a matmul was measured to reach
        ceiling_floor_s = floor_step_time_s(
            tokens_per_step=tokens_dev, flops_per_token=fpt, peak_flops=inp.ceiling_flops
        )

    tokens_per_s = achieved = mfu_spec = mfu_ceiling = nano = nano_ratio = None
    if inp.step_time_s is not None:
        tokens_per_s = tokens_dev * inp.world_size / inp.step_time_s
        achieved = flops_dev / inp.step_time_s
        mfu_spec = achieved / inp.peak_flops if inp.peak_flops else None
        mfu_ceiling = achieved / inp.ceiling_flops if inp.ceiling_flops else None
        # nanoGPT divides grad accumulation by the world size, so fwdbwd_per_iter is per process.
        nano = nanogpt_reported_mfu(
            n_layer=inp.n_layer,
            n_head=inp.n_head,
            n_embd=inp.n_embd,
            block_size=inp.block_size,
            num_params=n,
            fwdbwd_per_iter=inp.micro_batch * inp.grad_accum,
            dt_s=inp.step_time_s,
        )
        nano_ratio = nano / mfu_spec if mfu_spec else None

    target_needed = target_possible = None
    if inp.target_step_time_s is not None and floor_s is not None:
        target_needed = floor_s / inp.target_step_time_s
        target_possible = target_needed <= 1.0

    report = FloorReport(
        inputs=inp,
        num_params=n,
        tokens_per_step_per_device=tokens_dev,
        tokens_per_step=tokens_dev * inp.world_size,
        flops_per_token=fpt,
        flops_per_step_per_device=flops_dev,
        flops_per_step=flops_dev * inp.world_size,
        floor_s=floor_s,
        ceiling_floor_s=ceiling_floor_s,
        tokens_per_s=tokens_per_s,
        achieved_flops_per_device=achieved,
        mfu_spec=mfu_spec,
        mfu_ceiling=mfu_ceiling,
        nanogpt_mfu=nano,
        nanogpt_over_mfu=nano_ratio,
        target_mfu_needed=target_needed,
        target_possible=target_possible,
    )
    report.notes.extend(_notes(report))
    return report


def _notes(r: FloorReport) -> list[str]:
    inp, notes = r.inputs, []
    if inp.peak_flops is None:
        notes.append(
            f"No datasheet peak is known for {inp.device_name!r} in {inp.dtype}: no spec MFU and "
            "no 100%-peak floor (never an A100 number in its place). "
            + (
                "The matmul ceiling below stands in for it."
                if inp.ceiling_flops
                else "Pass --ceiling-tflops, or run a trial on the device to measure a matmul "
                "ceiling."
            )
        )
    if r.mfu_spec is not None and r.mfu_spec > 1.0:
        notes.append(
            f"A step of {inp.step_time_s:g} s would be {100 * r.mfu_spec:.0f}% of the peak, which "
            "is impossible: the step time, the batch split or the device is wrong."
        )
    if r.nanogpt_mfu is not None:
        notes.append(_nanogpt_sentence(r))
    if r.mfu_spec is not None and r.mfu_spec <= 1.0:
        notes.append(
            f"The {inp.step_time_s - r.floor_s:.2f} s per step above the floor is where data wait, "
            "compile, checkpoints, host overhead and kernel efficiency can hide; arithmetic cannot "
            "split it, a measurement can: python -m train.explain --run <trial overrides>."
        )
    if r.target_possible is False:
        notes.append(
            f"A target of {inp.target_step_time_s:g} s per step is physically impossible in "
            f"{inp.dtype}: it is {r.target_mfu_needed:.2f}x below the {r.floor_s:.2f} s "
            f"{inp.dtype} floor (it would need {100 * r.target_mfu_needed:.0f}% MFU)."
        )
    elif r.target_possible and r.ceiling_floor_s and inp.target_step_time_s < r.ceiling_floor_s:
        notes.append(
            f"A target of {inp.target_step_time_s:g} s per step is above the peak floor but below "
            f"the {r.ceiling_floor_s:.2f} s matmul-ceiling floor: every FLOP would have to run "
            "faster than a large dense matmul does on this device."
        )
    elif inp.target_step_time_s is not None and r.floor_s is None:
        notes.append("The target cannot be checked without a peak for this device and dtype.")
    if float8_below_floor(r):
        notes.append(
            f"The floors above are bf16's. This GPU has float8 tensor cores (runtime.float8): "
            f"the converted matmuls run at up to twice the bf16 peak, so a float8 run can step "
            f"below the {r.floor_s:.2f} s bf16 floor, never below half of it "
            f"({r.floor_s / 2:.2f} s); its MFU is still counted as the same FLOPs against the "
            f"bf16 peak (bf16-equivalent)."
        )
    return notes


def float8_below_floor(r: FloorReport) -> bool:
    """Whether a float8 run could step below this bf16 floor: a bf16 floor on a GPU with float8
    tensor cores (compute capability >= 8.9, by its name)."""
    chip = chip_for(r.inputs.device_name)
    cap = chip.capability if chip else None
    return (
        r.inputs.dtype == "bf16"
        and r.floor_s is not None
        and cap is not None
        and cap >= FLOAT8_MIN_CAPABILITY
    )


def _nanogpt_sentence(r: FloorReport) -> str:
    inp = r.inputs
    same = (
        f"nanoGPT's estimate_mfu counts the same {r.flops_per_token:.3g} FLOP/token over "
        f"batch_size x gradient_accumulation_steps x block_size = {r.tokens_per_step_per_device:,} "
        f"tokens per iteration and process, but divides by the A100's "
        f"{NANOGPT_PROMISED_FLOPS / 1e12:.0f} TFLOP/s bf16 peak on every GPU"
    )
    if r.mfu_spec is None:
        return same + "; with no peak for this device there is nothing to compare it to."
    return (
        f"{same}; this device's {inp.dtype} peak is {inp.peak_flops / 1e12:.1f} TFLOP/s, "
        f"{r.nanogpt_over_mfu:.2f}x that, so its {100 * r.nanogpt_mfu:.1f}% 'of an A100' is "
        f"{100 * r.mfu_spec:.1f}% of this device."
    )


def _tflops(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x / 1e12:,.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:,.1f} GFLOP/s"


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if abs(x) >= 1e-3 else f"{100 * x:.2g}%"


def _secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} s"


def format_floor(r: FloorReport) -> str:
    """The human report of `python -m train.explain` arithmetic mode."""
    inp = r.inputs
    world = f" x {inp.world_size} processes" if inp.world_size > 1 else ""
    lines = [
        f"{inp.model} ({r.num_params:,} params without wpe) on {inp.device_name}, {inp.dtype}",
        f"  tokens per step     {inp.micro_batch} x {inp.grad_accum} x {inp.block_size}{world} = "
        f"{r.tokens_per_step:,}",
        f"  FLOPs per token     {r.flops_per_token:.4g}  (6N + 12·L·H·Q·T)",
        f"  FLOPs per step      {r.flops_per_step_per_device:.4g} per device",
        f"  device peak         {_tflops(inp.peak_flops)}"
        + (f"  ({inp.peak_source})" if inp.peak_source else "  (no datasheet peak known)"),
        f"  floor (100% peak)   {_secs(r.floor_s)} per step"
        + (f" ({inp.dtype})" if r.floor_s is not None else ""),
    ]
    if inp.ceiling_flops:
        lines.append(
            f"  floor (ceiling)     {_secs(r.ceiling_floor_s)} per step at "
            f"{_tflops(inp.ceiling_flops)} ({inp.ceiling_source})"
        )
    else:
        lines.append("  floor (ceiling)     n/a: no measured matmul ceiling for this device/dtype")
    if inp.step_time_s is not None:
        lines += [
            f"  measured step       {inp.step_time_s:.4g} s -> {r.tokens_per_s:,.0f} tokens/s, "
            f"{_tflops(r.achieved_flops_per_device)} per device",
            f"  MFU                 {_pct(r.mfu_spec)} of peak"
            + (f", {_pct(r.mfu_ceiling)} of the matmul ceiling" if r.mfu_ceiling else ""),
            f"  nanoGPT would say   {_pct(r.nanogpt_mfu)} (A100 312 TFLOP/s denominator)",
        ]
        if r.floor_s is not None:
            lines.append(
                f"  above the floor     {inp.step_time_s - r.floor_s:.2f} s per step "
                f"({inp.step_time_s / r.floor_s:.2f}x the floor)"
            )
    if inp.target_step_time_s is not None:
        verdict = {True: "possible", False: f"IMPOSSIBLE in {inp.dtype}", None: "unknown"}[
            r.target_possible
        ]
        lines.append(
            f"  target step         {inp.target_step_time_s:g} s: {verdict}"
            + (f" (needs {_pct(r.target_mfu_needed)} MFU)" if r.target_mfu_needed else "")
        )
    lines += [f"  - {n}" for n in r.notes]
    return "\n".join(lines)
