"""The floor arithmetic against hand-computed cases (train/explain/floor.py)."""

import math

import pytest

from train.core.flops import lookup_peak
from train.explain.cli import arithmetic_inputs, parse_args
from train.explain.floor import FloorInputs, floor_report, format_floor

# Hand-computed FLOPs per token, 6N + 12·L·H·Q·T (N without wpe, from conf/model/*.yaml comments):
# gpt2:    6 * 123,689,472 + 12*12*12*64*1024 = 742,136,832 + 113,246,208
GPT2_FPT = 855_383_040
# gpt2-xl: 6 * 1,556,048,000 + 12*48*25*64*1024 = 9,336,288,000 + 943,718,400
GPT2_XL_FPT = 10_280_006_400
# tiny: N = 2 * (12*64² + 2*64 + 11*64) + 4096*64 + 2*64 = 362,240; 6N + 12*2*2*32*64
TINY_FPT = 2_271_744

SHAPES = {
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50304, block_size=1024),
    "gpt2-xl": dict(n_layer=48, n_head=25, n_embd=1600, vocab_size=50304, block_size=1024),
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, vocab_size=4096, block_size=64),
}


def inputs(
    model: str, device: str, dtype: str = "bf16", *, tf32: bool = False, **kw
) -> FloorInputs:
    peak = lookup_peak(device, dtype, tf32=tf32)
    return FloorInputs(
        model=model,
        **SHAPES[model],
        device_name=device,
        dtype=dtype,
        peak_flops=peak.flops if peak else None,
        peak_source=peak.source if peak else None,
        **kw,
    )


@pytest.mark.parametrize(
    ("model", "device", "split", "step_s", "fpt", "peak"),
    [
        # The issue: 1,048,576 tokens x 1.028e10 FLOP = 1.0779e16 FLOP / 989.5e12 = 10.894 s.
        ("gpt2-xl", "NVIDIA H200", (16, 64, 1), 21.0, GPT2_XL_FPT, 989.5e12),
        # nanoGPT's own GPT-2 config on an A100: 12 x 40 x 1024 = 491,520 tokens; same denominator,
        # so nanoGPT's number equals ours.
        ("gpt2", "NVIDIA A100-SXM4-80GB", (12, 40, 1), 3.0, GPT2_FPT, 312e12),
        # H100 PCIe (756 TFLOP/s dense bf16), one 8-sequence micro-batch.
        ("gpt2", "NVIDIA H100 PCIe", (8, 1, 1), 0.02, GPT2_FPT, 756e12),
        # 8 x H100 SXM: per-device numbers; tokens/s counts all processes.
        ("gpt2", "NVIDIA H100 80GB HBM3", (12, 5, 8), 0.2, GPT2_FPT, 989.4e12),
    ],
)
def test_known_devices(model, device, split, step_s, fpt, peak) -> None:
    mb, ga, world = split
    r = floor_report(
        inputs(model, device, micro_batch=mb, grad_accum=ga, world_size=world, step_time_s=step_s)
    )
    device_tokens = mb * ga * 1024  # one device's tokens per step, what its floor and MFU count
    assert r.flops_per_token == fpt
    assert r.tokens_per_step == device_tokens * world
    assert r.floor_s == pytest.approx(fpt * device_tokens / peak, rel=1e-9)
    assert r.mfu_spec == pytest.approx(fpt * device_tokens / step_s / peak, rel=1e-9)
    # nanoGPT's estimate_mfu divides by an A100's 312 TFLOP/s whatever the device.
    assert r.nanogpt_mfu == pytest.approx(fpt * device_tokens / step_s / 312e12, rel=1e-9)
    assert r.tokens_per_s == pytest.approx(device_tokens * world / step_s)


def test_issue_scenario() -> None:
    r = floor_report(
        inputs(
            "gpt2-xl",
            "NVIDIA H200",
            micro_batch=16,
            grad_accum=64,
            step_time_s=21.0,
            target_step_time_s=8.0,
        )
    )
    assert r.tokens_per_step == 1_048_576
    assert r.flops_per_token == pytest.approx(1.028e10, rel=1e-3)
    assert r.floor_s == pytest.approx(10.9, abs=0.2)
    assert r.mfu_spec == pytest.approx(0.51, abs=0.02)
    assert r.tokens_per_s == pytest.approx(49_932, abs=1)
    # nanoGPT's 164%: the same FLOPs over the A100's 312 TFLOP/s; ratio = 989.5 / 312.
    assert r.nanogpt_mfu == pytest.approx(1.645, abs=0.001)
    assert r.nanogpt_over_mfu == pytest.approx(989.5 / 312)
    assert r.target_possible is False
    assert r.target_mfu_needed == pytest.approx(r.floor_s / 8.0)
    assert r.target_mfu_needed == pytest.approx(1.36, abs=0.01)
    text = format_floor(r)
    assert "IMPOSSIBLE in bf16" in text and "1.36x below the 10.89 s bf16 floor" in text
    assert "floor (100% peak)   10.89 s per step (bf16)" in text
    # the float8 note names the floor it beats as bf16's (issue 35): no contradiction with the
    # IMPOSSIBLE above it, and it bounds what float8 can do
    (note,) = [n for n in r.notes if "float8" in n]
    assert note.startswith("The floors above are bf16's.") and "never below half of it" in note
    assert "164.5%" in text and "51.9%" in text


def test_unknown_device_has_no_spec_and_never_an_a100() -> None:
    r = floor_report(
        inputs(
            "tiny",
            "Mystery Accelerator 9000",
            "fp32",
            micro_batch=8,
            grad_accum=8,
            step_time_s=0.5,
            target_step_time_s=0.1,
        )
    )
    assert r.inputs.peak_flops is None
    assert (r.floor_s, r.mfu_spec, r.target_possible) == (None, None, None)
    assert r.flops_per_token == TINY_FPT
    assert any("No datasheet peak" in n and "never an A100" in n for n in r.notes)
    assert any("cannot be checked" in n for n in r.notes)


def test_unknown_device_uses_a_given_ceiling() -> None:
    inp = inputs(
        "tiny",
        "cpu",
        "fp32",
        micro_batch=8,
        grad_accum=8,
        step_time_s=0.5,
        ceiling_flops=50e9,
        ceiling_source="given",
    )
    r = floor_report(inp)
    assert r.ceiling_floor_s == pytest.approx(TINY_FPT * 4096 / 50e9)
    assert r.mfu_ceiling == pytest.approx(TINY_FPT * 4096 / 0.5 / 50e9)
    assert r.floor_s is None


@pytest.mark.parametrize(
    ("dtype", "tf32", "peak"),
    [
        ("fp32", False, 19.5e12),
        ("fp32", True, 156e12),
        ("bf16", False, 312e12),
        ("tf32", False, 156e12),
    ],
)
def test_fp32_with_and_without_tf32_use_the_right_peak(dtype, tf32, peak) -> None:
    argv = [
        "--model",
        "gpt2",
        "--micro-batch",
        "4",
        "--device",
        "NVIDIA A100-SXM4-40GB",
        "--dtype",
        dtype,
        "--tf32" if tf32 else "--no-tf32",
    ]
    r = floor_report(arithmetic_inputs(parse_args(argv)))
    assert r.inputs.peak_flops == peak
    assert r.floor_s == pytest.approx(GPT2_FPT * 4096 / peak)


def test_target_between_peak_and_ceiling_floors() -> None:
    r = floor_report(
        inputs(
            "gpt2",
            "NVIDIA H200",
            micro_batch=8,
            grad_accum=1,
            ceiling_flops=700e12,
            ceiling_source="given",
            target_step_time_s=0.009,
        )
    )
    assert r.floor_s < 0.009 < r.ceiling_floor_s
    assert r.target_possible is True
    assert any("matmul-ceiling floor" in n for n in r.notes)


def test_step_faster_than_the_floor_is_flagged() -> None:
    r = floor_report(
        inputs("gpt2-xl", "NVIDIA H200", micro_batch=16, grad_accum=64, step_time_s=5.0)
    )
    assert r.mfu_spec > 1
    assert any("impossible" in n for n in r.notes)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(micro_batch=0), "micro_batch must be a positive integer, got 0"),
        (dict(grad_accum=-1), "grad_accum must be a positive integer"),
        (dict(step_time_s=0.0), "step_time_s must be > 0"),
        (dict(peak_flops=-1.0), "peak_flops must be > 0"),
        (dict(n_head=3, n_embd=100), r"n_embd \(100\) must be divisible by n_head \(3\)"),
    ],
)
def test_invalid_inputs(kw, match) -> None:
    base = dict(
        model="tiny", **SHAPES["tiny"], micro_batch=1, grad_accum=1, device_name="cpu", dtype="fp32"
    )
    with pytest.raises(ValueError, match=match):
        FloorInputs(**{**base, **kw})


def test_flops_per_step_is_tokens_times_flops_per_token() -> None:
    r = floor_report(inputs("tiny", "cpu", "fp32", micro_batch=3, grad_accum=5, world_size=2))
    assert r.flops_per_step_per_device == TINY_FPT * 3 * 5 * 64
    assert r.flops_per_step == 2 * r.flops_per_step_per_device
    assert math.isclose(r.flops_per_step, TINY_FPT * r.tokens_per_step)
