import logging
import math
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils.flop_counter import FlopCounterMode

from train.core.chips import Peak
from train.core.flops import (
    floor_step_time_s,
    flops_per_token,
    gpt2_num_params,
    lookup_peak,
    mfu,
    nanogpt_reported_mfu,
    num_params_of,
)
from train.model.gpt import GPT, ModelConfig

PRESET_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"
PRESETS = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name: str) -> ModelConfig:
    return ModelConfig(**yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text()))


def test_presets_present() -> None:
    expected = {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny", "small-cpu"}
    assert expected <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_name_matches_file(name: str) -> None:
    assert load_preset(name).name == name


# ---- FLOPs per token --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # 6*10 + 12*1*1*2*3 = 60 + 72
        (dict(n_layer=1, n_head=1, n_embd=2, seq_len=3, vocab_size=5, num_params=10), 132.0),
        # 6*100 + 12*2*4*2*10 = 600 + 1920 (head dim 8 / 4 = 2)
        (dict(n_layer=2, n_head=4, n_embd=8, seq_len=10, vocab_size=7, num_params=100), 2520.0),
        # GPT-2 124M at T=1024: 6 * 123,689,472 + 12*12*12*64*1024
        (
            dict(n_layer=12, n_head=12, n_embd=768, seq_len=1024, vocab_size=50304),
            6 * 123_689_472 + 113_246_208,
        ),
        # Same model at T=256: only the attention term shrinks.
        (
            dict(n_layer=12, n_head=12, n_embd=768, seq_len=256, vocab_size=50304),
            6 * 123_689_472 + 113_246_208 / 4,
        ),
    ],
)
def test_flops_per_token_table(kwargs: dict, expected: float) -> None:
    assert flops_per_token(**kwargs) == pytest.approx(expected, rel=1e-12)


def test_flops_per_token_rejects_bad_heads() -> None:
    with pytest.raises(ValueError, match="divisible"):
        flops_per_token(n_layer=1, n_head=3, n_embd=8, seq_len=4, vocab_size=10)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # GPT-2 124M with the real 50257 vocab: the well-known 124,439,808 total.
        (
            dict(
                n_layer=12,
                n_embd=768,
                vocab_size=50257,
                block_size=1024,
                exclude_position_embedding=False,
            ),
            124_439_808,
        ),
        # One block, C=2, V=3, no bias: 12*4 + 2*2 (LN gains) + 3*2 (wte) + 2 (ln_f) = 60.
        (dict(n_layer=1, n_embd=2, vocab_size=3, block_size=5, bias=False), 60),
    ],
)
def test_gpt2_num_params_table(kwargs: dict, expected: int) -> None:
    assert gpt2_num_params(**kwargs) == expected


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("exclude", [True, False])
def test_num_params_analytic_matches_model(name: str, exclude: bool) -> None:
    cfg = load_preset(name)
    with torch.device("meta"):
        model = GPT(cfg)
    expected = num_params_of(cfg, exclude_position_embedding=exclude)
    assert model.num_params(exclude_position_embedding=exclude) == expected


@pytest.mark.parametrize("name", PRESETS)
def test_flops_per_token_matches_flop_counter(name: str) -> None:
    """Analytic 6N + 12LHQT within 2% of torch's FlopCounterMode for one forward+backward.

    On the meta device SDPA takes the math path (bmm + softmax), so attention FLOPs are counted;
    FlopCounterMode does not count biases, LayerNorm or the embedding lookup, which is the gap.
    """
    cfg = load_preset(name)
    T = cfg.block_size
    with torch.device("meta"):
        model = GPT(cfg)
        idx = torch.zeros(1, T, dtype=torch.long)
    counter = FlopCounterMode(display=False)
    with counter:
        _, loss = model(idx, idx)
        loss.backward()
    counted_per_token = counter.get_total_flops() / T
    analytic = flops_per_token(
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        seq_len=T,
        vocab_size=cfg.vocab_size,
        num_params=model.num_params(),
    )
    assert analytic == pytest.approx(counted_per_token, rel=0.02)


# ---- Peaks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device_name", "dtype", "flops"),
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 312e12),
        ("NVIDIA A100-PCIE-40GB", "fp16", 312e12),
        ("NVIDIA A100-SXM4-40GB", "tf32", 156e12),
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5e12),
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4e12),
        ("NVIDIA H100 80GB HBM3", "fp16", 989.4e12),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.7e12),
        ("NVIDIA H100 80GB HBM3", "fp32", 66.9e12),
        ("NVIDIA H100 PCIe", "bf16", 756e12),
        ("NVIDIA H100 PCIe", "tf32", 378e12),
        ("NVIDIA H100 PCIe", "fp32", 51.2e12),
        ("NVIDIA H100 NVL", "bf16", 835.5e12),
        ("NVIDIA H100 NVL", "tf32", 417.5e12),
        ("NVIDIA H100 NVL", "fp32", 60e12),
        ("NVIDIA H200", "bf16", 989.5e12),
        ("NVIDIA H200", "tf32", 494.5e12),
        ("NVIDIA H200", "fp32", 67e12),
        ("NVIDIA B200", "bf16", 2.25e15),
        ("NVIDIA B200", "tf32", 1.1e15),
        ("NVIDIA B200", "fp32", 75e12),
        ("NVIDIA L4", "bf16", 121e12),
        ("NVIDIA L4", "tf32", 60e12),
        ("NVIDIA L4", "fp32", 30.3e12),
        ("NVIDIA A10", "bf16", 125e12),
        ("NVIDIA A10", "tf32", 62.5e12),
        ("NVIDIA A10", "fp32", 31.2e12),
    ],
)
def test_lookup_peak_table(device_name: str, dtype: str, flops: float) -> None:
    peak = lookup_peak(device_name, dtype)
    assert isinstance(peak, Peak)
    assert peak.flops == pytest.approx(flops)
    assert "NVIDIA" in peak.source


@pytest.mark.parametrize(
    ("device_name", "tf32", "flops"),
    [
        ("NVIDIA A100-SXM4-80GB", False, 19.5e12),
        ("NVIDIA A100-SXM4-80GB", True, 156e12),
        ("NVIDIA H100 80GB HBM3", True, 494.7e12),
    ],
)
def test_lookup_peak_fp32_uses_tf32_when_allowed(
    device_name: str, tf32: bool, flops: float
) -> None:
    peak = lookup_peak(device_name, "fp32", tf32=tf32)
    assert peak is not None and peak.flops == pytest.approx(flops)


def test_lookup_peak_tf32_flag_does_not_change_bf16() -> None:
    peak = lookup_peak("NVIDIA H100 80GB HBM3", "bf16", tf32=True)
    assert peak is not None and peak.flops == pytest.approx(989.4e12)


def test_lookup_peak_unknown_device_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="train.core.flops"):
        assert lookup_peak("NVIDIA GeForce RTX 4090", "bf16") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "RTX 4090" in warnings[0].getMessage()


def test_lookup_peak_cpu_is_none_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="train.core.flops"):
        assert lookup_peak("cpu", "fp32") is None
    assert not caplog.records


def test_lookup_peak_bad_dtype() -> None:
    with pytest.raises(ValueError, match="dtype must be one of"):
        lookup_peak("NVIDIA L4", "fp8")


# ---- MFU, floor, nanoGPT ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens_per_s", "fpt", "peak", "expected"),
    [
        (1000.0, 1e9, 1e13, 0.1),
        (312e12 / 6e9, 6e9, 312e12, 1.0),
        (500.0, 2e9, 4e12, 0.25),
        (500.0, 2e9, None, None),
        (500.0, 2e9, 0.0, None),
    ],
)
def test_mfu_table(
    tokens_per_s: float, fpt: float, peak: float | None, expected: float | None
) -> None:
    got = mfu(tokens_per_s=tokens_per_s, flops_per_token=fpt, peak_flops=peak)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tokens", "fpt", "peak", "expected_s"),
    [
        (1000, 1e9, 1e12, 1.0),
        # GPT-2 124M, 0.5M-token batch at T=1024 on one H100 SXM in bf16.
        (
            524_288,
            6 * 123_689_472 + 113_246_208,
            989.4e12,
            524_288 * (6 * 123_689_472 + 113_246_208) / 989.4e12,
        ),
    ],
)
def test_floor_step_time_table(tokens: int, fpt: float, peak: float, expected_s: float) -> None:
    assert floor_step_time_s(tokens_per_step=tokens, flops_per_token=fpt, peak_flops=peak) == (
        pytest.approx(expected_s)
    )


def test_floor_step_time_rejects_zero_peak() -> None:
    with pytest.raises(ValueError, match="peak_flops must be > 0"):
        floor_step_time_s(tokens_per_step=1, flops_per_token=1.0, peak_flops=0.0)


def test_nanogpt_reported_mfu_by_hand() -> None:
    # nanoGPT's default train.py run: GPT-2 124M, batch 12 x grad-accum 40 (per process), T=1024.
    n = 123_689_472
    per_token = 6 * n + 12 * 12 * 12 * 64 * 1024
    dt = 2.0
    expected = per_token * 1024 * 12 * 40 / dt / 312e12
    got = nanogpt_reported_mfu(
        n_layer=12,
        n_head=12,
        n_embd=768,
        block_size=1024,
        num_params=n,
        fwdbwd_per_iter=12 * 40,
        dt_s=dt,
    )
    assert got == pytest.approx(expected)
    # Divides by the A100 peak whatever the device: on an H100 our MFU is lower by 312/989.4.
    ours = mfu(tokens_per_s=1024 * 12 * 40 / dt, flops_per_token=per_token, peak_flops=989.4e12)
    assert ours is not None and math.isclose(got * 312 / 989.4, ours, rel_tol=1e-12)
