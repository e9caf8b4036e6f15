"""How long one trial may run: limits sized to the model and the device, not fixed numbers.

A GPT-2 XL step of a million tokens takes ~35 s on an H100; a tiny CPU step takes a quarter of a
second. One fixed trial limit either kills the first or lets the second hang for ten minutes, so
the sweep predicts each trial from arithmetic (train/core/flops.py, torch-free) and sizes
its limits:

    predicted step  = FLOPs per step / (device peak x MFU)   (x recompute, see below; MFU is
                      ASSUMED_MFU, or COMPILED_GPU_MFU for a compiled step on a known GPU)
    hard limit      = SAFETY x (set-up + compile + warm-up + measured window + checkpoint saves)
    stall limit     = SAFETY x (the longest quiet gap of a healthy trial: report_every steps and
                      the saves among them; set-up, compile and warm-up send heartbeat lines)

and neither goes below the old fixed limits (DEFAULT_TIMEOUT_S, DEFAULT_STALL_S). A value the user
sets (hydra.sweeper.budget.trial_timeout_s / stall_timeout_s > 0) is used as is. The same
arithmetic, without SAFETY, is the expected wall time that plan mode sums into the sweep's wall
time.

Pure: no torch, no I/O; `cfg` is a flat dotted trainer config (the sweeper's base merged with a
point).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sweeper.forecast.trial import (
    CHECKPOINT_BYTES_PER_PARAM,
    TRIAL_DEFAULTS,
    WRITE_BYTES_PER_S,
    TrialTime,
    trial_time,
    window_steps,
)
from sweeper.space.point import Point
from train.core.chips import chip_for
from train.core.flops import (
    floor_step_time_s,
    flops_per_token,
    gpt2_num_params,
    lookup_peak,
)
from train.core.keys import (
    BIAS,
    BLOCK_SIZE,
    CHECKPOINT_EVERY,
    COMPILE,
    DEVICE,
    DTYPE,
    N_EMBD,
    N_HEAD,
    N_LAYER,
    PROJECT_ABOVE_S,
    RECOMPUTE,
    TF32,
    TOKENS_PER_STEP,
    TRIAL_MAX_SECONDS,
    TRIAL_MAX_STEPS,
    TRIAL_MIN_STEPS,
    TRIAL_REPORT_EVERY,
    VOCAB_SIZE,
)
from train.core.rules import is_selective, num_checkpointed_blocks, resolve_dtype_name

if TYPE_CHECKING:
    from sweeper.space.constraints import SpaceContext

# gpt2-xl bf16 eager, micro-batch 4, on an H100 SXM (torch 2.11): 30,976 tokens/s x 1.028e10
# FLOP/token = 318 TFLOP/s, 32% of the 989 TFLOP/s dense peak. Smaller micro-batches run lower,
# compiled ones higher; SAFETY covers both.
ASSUMED_MFU = 0.3
# A compiled step on a GPU of the datasheet table: gpt2-xl bf16, compile=default, on an H200
# (2026-11-26, the sweep's own trials, docs/gpu/2026-11-26-h200): 50.9% and 52.4% of the dense
# peak in real full steps of 1,048,576 tokens at micro-batch 16 and 32. The H100's one compiled
# figure agrees (2026-11-23: 40.7% of the model's FLOPs with every block recomputed, 1.33x the
# work: 54% of the hardware's). The rounded-down 50% replaces ASSUMED_MFU there. It is a big
# model's figure: small gpt2 compiled ran at 34.8% on the H100 (launch-bound), so its plan is
# short there; its trials' limits still never go below DEFAULT_TIMEOUT_S.
COMPILED_GPU_MFU = 0.5
SAFETY = 3.0  # hard and stall limits allow this many times the predicted duration
DEFAULT_TIMEOUT_S = 600.0  # the fixed limits used before; automatic limits never go below them
DEFAULT_STALL_S = 300.0
# A CPU has no datasheet peak. 10 GFLOP/s is below every rate measured on the 2-core EPYC these
# demos run on (139 GFLOP/s fp32 and 19 GFLOP/s bf16 matmul ceilings), so predictions err long.
CPU_FLOPS = 10e9
# A GPU missing from train/core/flops.py's peak table: rates below an L4's (T4-class), again
# erring long: a timeout too generous costs time only when a trial hangs, one too short kills it.
UNKNOWN_GPU_FLOPS = {"bf16": 50e12, "fp16": 50e12, "tf32": 25e12, "fp32": 8e12}
# A race run measures real full optimizer steps: a projection (train/trial/measurement.py) is a
# search shortcut, never what a winner is exported on.
REAL_STEP_KEYS: Mapping[str, Any] = MappingProxyType({PROJECT_ABOVE_S: 0})


@dataclass(frozen=True, kw_only=True)
class StepPrediction:
    """One optimizer step of a config on a device, from arithmetic."""

    flops_per_step: float  # training FLOPs of one optimizer step on one device
    num_params: int  # parameters counted in 6N (position embedding excluded)
    dtype: str  # the compute dtype the peak is for: bf16 | fp16 | tf32 | fp32
    peak_flops: float | None  # datasheet dense peak, None for a CPU or an unknown GPU
    peak_source: str  # where the rate used for the prediction comes from
    floor_s: float | None  # the step at 100% of the datasheet peak (None without one)
    predicted_s: float  # the step at `mfu` of the rate, activation recompute included
    mfu: float = ASSUMED_MFU  # the share of the rate assumed: ASSUMED_MFU or COMPILED_GPU_MFU


@dataclass(frozen=True, kw_only=True)
class TrialLimits:
    """What one trial gets: its hard and stall limits, and why."""

    timeout_s: float  # hard wall-clock limit of the trial process
    stall_timeout_s: float | None  # quiet time that counts as a hang; None = no stall check
    automatic: bool  # True when the sweep sized the hard limit (the user set none)
    step: StepPrediction  # the predicted optimizer step they are sized from
    expected: TrialTime  # the trial's expected duration (no safety factor)


def recompute_factor(activation_checkpointing: Any, n_layer: int) -> float:
    """Extra compute of activation checkpointing: each checkpointed block (the model's rule,
    train.core.config.num_checkpointed_blocks) runs its forward twice, and a forward is a third of
    forward + backward. `selective` reruns no matmul and no attention (their outputs are kept,
    train/model/recompute.py), only LayerNorm, GELU and the adds: ~100C FLOPs per token and block
    against its matmuls' 72C^2 (forward and backward; C = n_embd), under 0.1% at gpt2-xl's 1600,
    so its factor is 1 in the FLOPs this arithmetic counts (6N + attention)."""
    mode = str(activation_checkpointing or "none")
    if is_selective(mode):
        return 1.0
    checkpointed = num_checkpointed_blocks(n_layer, mode)
    return 1.0 + checkpointed / n_layer / 3.0


def model_params(cfg: Mapping[str, Any]) -> int:
    """The GPT-2 parameters of a flat config's model (position embedding excluded, as in 6N)."""
    return gpt2_num_params(
        n_layer=int(cfg[N_LAYER]),
        n_embd=int(cfg[N_EMBD]),
        vocab_size=int(cfg[VOCAB_SIZE]),
        block_size=int(cfg[BLOCK_SIZE]),
        bias=bool(cfg.get(BIAS, True)),
    )


def predict_step(
    cfg: Mapping[str, Any], *, device_name: str, device_type: str, bf16_supported: bool
) -> StepPrediction:
    """FLOPs of one optimizer step and its predicted duration on `device_name`."""
    n_layer, block = int(cfg[N_LAYER]), int(cfg[BLOCK_SIZE])
    n_params = model_params(cfg)
    per_token = flops_per_token(
        n_layer=n_layer,
        n_head=int(cfg[N_HEAD]),
        n_embd=int(cfg[N_EMBD]),
        seq_len=block,
        vocab_size=int(cfg[VOCAB_SIZE]),
        num_params=n_params,
    )
    tokens = int(cfg[TOKENS_PER_STEP])
    flops = per_token * tokens
    dtype = resolve_dtype_name(
        cfg.get(DTYPE), device_type=device_type, bf16_supported=bf16_supported
    )
    tf32 = bool(cfg.get(TF32, False))
    peak = None
    if device_type == "cpu":
        rate, source = CPU_FLOPS, f"a conservative CPU rate of {CPU_FLOPS / 1e9:.0f} GFLOP/s"
    elif (chip := chip_for(device_name)) is None or chip.peaks is None:
        key = "tf32" if dtype == "fp32" and tf32 else dtype
        rate = UNKNOWN_GPU_FLOPS[key]
        source = f"no datasheet peak for {device_name!r}: a conservative {rate / 1e12:.0f} TFLOP/s"
    else:
        found = lookup_peak(device_name, dtype, tf32=tf32)
        assert found is not None  # the chip has peaks, and they list every dtype
        peak, rate, source = found.flops, found.flops, found.source
    slow = recompute_factor(cfg.get(RECOMPUTE), n_layer)
    compiled = str(cfg.get(COMPILE) or "none") != "none"
    mfu = COMPILED_GPU_MFU if peak is not None and compiled else ASSUMED_MFU
    return StepPrediction(
        flops_per_step=flops,
        num_params=n_params,
        dtype="tf32" if dtype == "fp32" and tf32 and device_type == "cuda" else dtype,
        peak_flops=peak,
        peak_source=source,
        floor_s=floor_step_time_s(
            tokens_per_step=tokens, flops_per_token=per_token, peak_flops=peak
        )
        if peak
        else None,
        predicted_s=flops * slow / (rate * mfu),
        mfu=mfu,
    )


def trial_limits(
    cfg: Mapping[str, Any],
    *,
    device_name: str,
    device_type: str,
    bf16_supported: bool,
    timeout_s: float = 0.0,
    stall_timeout_s: float = 0.0,
    warm: bool = False,
) -> TrialLimits:
    """The limits of one trial of `cfg`. timeout_s / stall_timeout_s are the user's settings:
    > 0 is used as is, 0 means automatic, and a negative stall_timeout_s turns the stall check
    off. `warm`: the expectation loads the graph from the compile cache (the limits never do)."""
    step = predict_step(
        cfg, device_name=device_name, device_type=device_type, bf16_supported=bf16_supported
    )
    expected = trial_time(
        cfg,
        step.predicted_s,
        device_type=device_type,
        device_name=device_name,
        num_params=step.num_params,
        warm=warm,
    )
    slow_step_s = SAFETY * step.predicted_s
    bound = trial_time(
        cfg,
        slow_step_s,
        device_type=device_type,
        device_name=device_name,
        num_params=step.num_params,
        scale=SAFETY,
    )
    # A trial that runs faster than predicted may measure full steps where the prediction
    # projected short ones: the window is then bounded by full steps of project_above_s.
    above = float(cfg.get(PROJECT_ABOVE_S) or 0.0)
    if bound.projected:
        unprojected = (
            window_steps(
                above,
                min_steps=int(cfg.get(TRIAL_MIN_STEPS) or TRIAL_DEFAULTS.min_steps),
                max_steps=int(cfg.get(TRIAL_MAX_STEPS) or TRIAL_DEFAULTS.max_steps),
                max_seconds=float(cfg.get(TRIAL_MAX_SECONDS) or TRIAL_DEFAULTS.max_seconds),
            )
            * above
        )
        bound_total = bound.total_s + max(0.0, unprojected - bound.window_s)
    else:
        bound_total = bound.total_s
    hard = timeout_s if timeout_s > 0 else max(DEFAULT_TIMEOUT_S, bound_total)
    if stall_timeout_s > 0:
        stall: float | None = stall_timeout_s
    elif stall_timeout_s < 0:
        stall = None
    else:
        # The longest quiet gap of a healthy trial: report_every measured steps and the saves
        # among them (set-up, compile and warm-up send heartbeats every ~10 s).
        report_every = int(cfg.get(TRIAL_REPORT_EVERY) or TRIAL_DEFAULTS.report_every)
        every = int(cfg.get(CHECKPOINT_EVERY) or 0)
        per_step = max(bound.window_s / max(bound.window_steps, 1), min(slow_step_s, above or 0))
        saves = math.ceil(report_every / every) if every > 0 else 0
        save_s = step.num_params * CHECKPOINT_BYTES_PER_PARAM / WRITE_BYTES_PER_S
        stall = max(DEFAULT_STALL_S, report_every * per_step + SAFETY * saves * save_s)
    return TrialLimits(
        timeout_s=hard,
        stall_timeout_s=stall,
        automatic=timeout_s <= 0,
        step=step,
        expected=expected,
    )


def limit_overrides(limits: TrialLimits) -> list[str]:
    """The limits as the overrides of a trial's Hydra job (sweeper/launch/job.py reads them back); a
    stall check that is off travels as -1."""
    stall = -1.0 if limits.stall_timeout_s is None else limits.stall_timeout_s
    return [
        f"hydra.sweeper.budget.trial_timeout_s={limits.timeout_s:.1f}",
        f"hydra.sweeper.budget.stall_timeout_s={stall:.1f}",
    ]


def point_limits(
    point: Mapping[str, Any],
    ctx: SpaceContext,
    *,
    timeout_s: float,
    stall_timeout_s: float,
    warm: bool = False,
) -> TrialLimits:
    """The limits of the trial of `point` (a Point, or the knobs of one) in the sweep of `ctx`."""
    full = Point.of(point).over(ctx.base)
    device_type = "cpu" if str(full.get(DEVICE, "auto")) == "cpu" else ctx.device_type
    return trial_limits(
        full,
        device_name=ctx.device_name or device_type,
        device_type=device_type,
        bf16_supported=ctx.bf16_supported,
        timeout_s=timeout_s,
        stall_timeout_s=stall_timeout_s,
        warm=warm,
    )


def point_forecast(point: Mapping[str, Any], ctx: SpaceContext, *, warm: bool = False) -> TrialTime:
    """The expected wall of the trial of `point`, phase by phase (its limits' `expected`, which
    the user's limit settings do not change); `warm`: its graph loads from the compile cache."""
    return point_limits(point, ctx, timeout_s=0.0, stall_timeout_s=0.0, warm=warm).expected


def forecast_point(point: Mapping[str, Any], ctx: SpaceContext) -> Point:
    """`point` as a Point with its forecast attached (a cold compile), its fit kept."""
    return Point.of(point).with_forecast(point_forecast(point, ctx))


def race_run_forecast(point: Mapping[str, Any], ctx: SpaceContext) -> TrialTime:
    """The expected wall of one race run of `point`: its knobs with real full steps."""
    return point_forecast(Point.of(point).with_knobs(REAL_STEP_KEYS), ctx)
