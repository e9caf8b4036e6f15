"""Trial limits from the predicted step time: pure tables, hand arithmetic."""

from __future__ import annotations

import pytest

from sweeper.space.limits import (
    ASSUMED_MFU,
    COMPILED_GPU_MFU,
    DEFAULT_STALL_S,
    DEFAULT_TIMEOUT_S,
    SAFETY,
    predict_step,
    recompute_factor,
    trial_limits,
    window_steps,
)
from tests.model_shapes import GPT2_XL
from tests.model_shapes import TINY as TINY_SHAPE

H100 = "NVIDIA H100 80GB HBM3"
TRIAL = {  # conf/sweep.yaml's trial window
    "trial.warmup_steps": 2,
    "trial.max_steps": 20,
    "trial.min_steps": 6,
    "trial.max_seconds": 20,
    "trial.report_every": 3,
}
XL = {
    **GPT2_XL,
    "batch.tokens_per_step": 1_048_576,
    "batch.micro_batch": 4,
    "batch.grad_accum": 256,
    "runtime.dtype": "bf16",
    "runtime.tf32": True,
    "runtime.compile": "none",
    "checkpoint.every_steps": 0,
    **TRIAL,
}
TINY = {
    **TINY_SHAPE,
    "batch.micro_batch": 8,
    "batch.grad_accum": 8,
    "runtime.dtype": "auto",
    "runtime.compile": "none",
    **TRIAL,
}
XL_FLOPS = 1.0783e16  # 1.028e10 FLOP/token x 1,048,576 tokens (README's worked example)


def limits(cfg: dict, **kw):
    args = {"device_name": H100, "device_type": "cuda", "bf16_supported": True, **kw}
    return trial_limits(cfg, **args)


@pytest.mark.parametrize(
    ("cfg", "device", "device_type", "dtype", "peak", "predicted_s"),
    [
        # bf16 on an H100 SXM: the README's 10.89 s floor, at 30% MFU 36.3 s
        (XL, H100, "cuda", "bf16", 989.4e12, XL_FLOPS / (989.4e12 * 0.3)),
        # fp32 matmuls on TF32 tensor cores: half the bf16 peak
        (
            {**XL, "runtime.dtype": "fp32"},
            H100,
            "cuda",
            "tf32",
            494.7e12,
            XL_FLOPS / (494.7e12 * 0.3),
        ),
        # fp32 on CUDA cores
        (
            {**XL, "runtime.dtype": "fp32", "runtime.tf32": False},
            H100,
            "cuda",
            "fp32",
            66.9e12,
            XL_FLOPS / (66.9e12 * 0.3),
        ),
        # auto is bf16 where the GPU has it
        (
            {**XL, "runtime.dtype": "auto"},
            "NVIDIA H200",
            "cuda",
            "bf16",
            989.5e12,
            XL_FLOPS / (989.5e12 * 0.3),
        ),
        # activation checkpointing recomputes every block's forward: 4/3 the compute time
        (
            {**XL, "runtime.activation_checkpointing": "every"},
            H100,
            "cuda",
            "bf16",
            989.4e12,
            XL_FLOPS * 4 / 3 / (989.4e12 * 0.3),
        ),
        # no datasheet peak: a conservative 50 TFLOP/s, never a borrowed A100 number
        (XL, "Some Future GPU", "cuda", "bf16", None, XL_FLOPS / (50e12 * 0.3)),
        # the CPU: a conservative 10 GFLOP/s
        (TINY, "cpu", "cpu", "fp32", None, None),
    ],
)
def test_predict_step(cfg, device, device_type, dtype, peak, predicted_s) -> None:
    p = predict_step(cfg, device_name=device, device_type=device_type, bf16_supported=True)
    assert p.dtype == dtype
    assert p.peak_flops == (None if peak is None else pytest.approx(peak, rel=1e-3))
    if peak is not None:
        assert p.floor_s == pytest.approx(p.flops_per_step / peak)
    if predicted_s is None:  # CPU: FLOPs per step over 10 GFLOP/s x the assumed MFU
        predicted_s = p.flops_per_step / (10e9 * ASSUMED_MFU)
    assert p.predicted_s == pytest.approx(predicted_s, rel=1e-3)


def test_xl_floor_matches_the_worked_example() -> None:
    p = predict_step(XL, device_name="NVIDIA H200", device_type="cuda", bf16_supported=True)
    assert p.floor_s == pytest.approx(10.89, abs=0.01)
    assert p.num_params == 1_556_048_000


@pytest.mark.parametrize(
    ("mode", "n_layer", "factor"),
    [
        ("none", 48, 1.0),
        ("every", 48, 4 / 3),
        ("every_2", 48, 1 + 0.5 / 3),
        ("every_4", 6, 1 + (1 / 6) / 3),
    ],  # of 6 blocks only the 4th: (i + 1) % 4 == 0, as the model
)
def test_recompute_factor(mode, n_layer, factor) -> None:
    assert recompute_factor(mode, n_layer) == pytest.approx(factor)


@pytest.mark.parametrize(
    ("step_s", "expected"),
    [
        (0.25, 20),  # 80 steps fit in 20 s: max_steps ends it
        (2.0, 10),  # the 10th step reaches 20 s
        (36.0, 6),  # min_steps holds the window open past 20 s
        (0.0, 20),
    ],
)
def test_window_steps(step_s, expected) -> None:
    assert window_steps(step_s, min_steps=6, max_steps=20, max_seconds=20) == expected


def test_the_cpu_demo_keeps_the_fixed_limits() -> None:
    lim = limits(TINY, device_name="cpu", device_type="cpu", bf16_supported=False)
    assert (lim.timeout_s, lim.stall_timeout_s) == (DEFAULT_TIMEOUT_S, DEFAULT_STALL_S)
    assert lim.automatic


def test_a_full_step_xl_trial_is_sized_from_its_step() -> None:
    # full steps measured (no projection): 2 warm-up + 6 window steps at 3x the predicted step,
    # after 3x the 26.6 s set-up (an H100 priced with the H200's); the stall allows 3 steps
    # (report_every) at 3x
    cfg = {**XL, "trial.project_above_s": 0}
    lim = limits(cfg)
    slow = SAFETY * XL_FLOPS / (989.4e12 * ASSUMED_MFU)
    assert lim.timeout_s == pytest.approx(SAFETY * 26.6 + 8 * slow, rel=1e-3)
    assert lim.stall_timeout_s == pytest.approx(3 * slow, rel=1e-3)
    assert lim.expected.window_steps == 6 and not lim.expected.projected


@pytest.mark.parametrize(
    ("device_name", "device_type", "compile_mode", "mfu"),
    [
        ("NVIDIA H200", "cuda", "default", COMPILED_GPU_MFU),  # measured on the H200
        ("NVIDIA H100 80GB HBM3", "cuda", "max-autotune-no-cudagraphs", COMPILED_GPU_MFU),
        ("NVIDIA H200", "cuda", "none", ASSUMED_MFU),  # eager: the older, lower figure
        ("cpu", "cpu", "default", ASSUMED_MFU),  # no datasheet peak: the CPU's own rate
        ("NVIDIA Made-Up GPU", "cuda", "default", ASSUMED_MFU),  # no peak known
    ],
)
def test_a_compiled_step_on_a_known_gpu_is_priced_at_the_measured_mfu(
    device_name, device_type, compile_mode, mfu
) -> None:
    step = predict_step(
        {**XL, "runtime.compile": compile_mode},
        device_name=device_name,
        device_type=device_type,
        bf16_supported=True,
    )
    assert step.mfu == mfu
    rate = step.flops_per_step / step.predicted_s / mfu  # the rate the prediction used
    if step.peak_flops is not None:
        assert rate == pytest.approx(step.peak_flops)


def test_compile_and_checkpoints_add_their_allowances() -> None:
    cfg = {**XL, "trial.project_above_s": 0}
    eager, compiled = limits(cfg), limits({**cfg, "runtime.compile": "default"})
    # 300 s of compile allowance for 48 layers, less the 8 steps (2 warm-up, 6 measured) that a
    # compiled step predicted at COMPILED_GPU_MFU saves over one at ASSUMED_MFU
    assert compiled.step.predicted_s == pytest.approx(
        eager.step.predicted_s * ASSUMED_MFU / COMPILED_GPU_MFU
    )
    faster = 8 * SAFETY * (eager.step.predicted_s - compiled.step.predicted_s)
    assert compiled.timeout_s - eager.timeout_s == pytest.approx(300.0 - faster, rel=1e-3)
    assert compiled.expected.compile_s == pytest.approx(62.9)  # the H200's, measured
    autotune = limits({**cfg, "runtime.compile": "max-autotune-no-cudagraphs"})
    assert autotune.timeout_s - eager.timeout_s == pytest.approx(900.0 - faster, rel=1e-3)
    # a save every 3 steps: 2 saves of 12 bytes x 1.556e9 params at 1 GB/s in the window
    saving = limits({**cfg, "checkpoint.every_steps": 3})
    assert saving.expected.checkpoint_s == pytest.approx(2 * 12 * 1.556048, rel=1e-6)
    assert saving.timeout_s - eager.timeout_s == pytest.approx(SAFETY * 2 * 12 * 1.556048)


def test_a_projected_trial_measures_short_steps() -> None:
    # a predicted 36 s step > project_above_s=5: short steps of 4 of the 256 micro-batches
    lim = limits({**XL, "trial.project_above_s": 5.0, "trial.project_micro_steps": 4})
    assert lim.expected.projected
    short = XL_FLOPS / (989.4e12 * ASSUMED_MFU) * 4 / 256
    assert lim.expected.warmup_s == pytest.approx(2 * short, rel=1e-3)
    assert lim.expected.window_steps == 20
    assert lim.timeout_s == DEFAULT_TIMEOUT_S  # short trials keep the floor


@pytest.mark.parametrize(
    ("timeout", "stall", "expected"),
    [
        (120.0, 20.0, (120.0, 20.0)),  # the user's values, even below the floor
        (120.0, -1.0, (120.0, None)),  # a negative stall turns the check off
        (0.0, 0.0, (DEFAULT_TIMEOUT_S, DEFAULT_STALL_S)),
    ],
)
def test_explicit_settings_override(timeout, stall, expected) -> None:
    lim = limits(
        TINY,
        device_name="cpu",
        device_type="cpu",
        bf16_supported=False,
        timeout_s=timeout,
        stall_timeout_s=stall,
    )
    assert (lim.timeout_s, lim.stall_timeout_s) == expected
    assert lim.automatic is (timeout == 0)
