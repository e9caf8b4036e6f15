"""train/core/cost.py: time to train the planned tokens and dollars per billion tokens."""

from __future__ import annotations

import pytest

from train.core.cost import (
    DEFAULT_PLANNED_TOKENS,
    device_price,
    planned_steps_for,
    resolve_planned_steps,
    train_time,
    usd_per_1b_tokens,
    validate_prices,
)
from train.core.flops import floor_step_time_s, flops_per_token, gpt2_num_params, lookup_peak

SEED_TOKENS_PER_STEP = 1_048_576  # GPT-2 XL: 16 x 64 x 1024


def _seed_floor_s() -> float:
    """The 100%-MFU floor of the seed's step: GPT-2 XL on the H200's dense bf16 peak."""
    n = gpt2_num_params(n_layer=48, n_embd=1600, vocab_size=50304, block_size=1024)
    fpt = flops_per_token(
        n_layer=48, n_head=25, n_embd=1600, seq_len=1024, vocab_size=50304, num_params=n
    )
    peak = lookup_peak("NVIDIA H200", "bf16")
    return floor_step_time_s(
        tokens_per_step=SEED_TOKENS_PER_STEP, flops_per_token=fpt, peak_flops=peak.flops
    )


def test_the_seed_floor_is_10_9_s() -> None:
    assert round(_seed_floor_s(), 1) == 10.9


@pytest.mark.parametrize(
    ("step_s", "hours"),
    [(21.0, 55.6), (None, 28.9)],  # None: the 100%-MFU floor
)
def test_seed_ten_billion_tokens(step_s: float | None, hours: float) -> None:
    steps = planned_steps_for(
        planned_tokens=DEFAULT_PLANNED_TOKENS, tokens_per_step=SEED_TOKENS_PER_STEP
    )
    assert steps == 9537  # 10e9 / 1,048,576 = 9536.7, rounded up to whole steps
    t = train_time(planned_steps=steps, step_s=step_s or _seed_floor_s())
    assert round(t.total_h, 1) == hours
    assert t.compile_s == t.checkpoint_s == 0.0 and t.num_saves == 0


@pytest.mark.parametrize(
    ("usd_per_hour", "expected"),
    [
        # 9537 x 21 s = 200,277 s = 55.633 h; x $2/h = $111.27 for 10B tokens = $11.127 per 1B
        (2.0, 9537 * 21 / 3600 * 2.0 / 10),
        (3.5, 9537 * 21 / 3600 * 3.5 / 10),
    ],
)
def test_seed_usd_per_billion_tokens(usd_per_hour: float, expected: float) -> None:
    t = train_time(planned_steps=9537, step_s=21.0)
    got = usd_per_1b_tokens(
        total_s=t.total_s, planned_tokens=DEFAULT_PLANNED_TOKENS, usd_per_hour=usd_per_hour
    )
    assert got == pytest.approx(expected)
    assert round(got, 2) == {2.0: 11.13, 3.5: 19.47}[usd_per_hour]


@pytest.mark.parametrize(
    ("kwargs", "total_s", "num_saves"),
    [
        ({"planned_steps": 100, "step_s": 1.0}, 100.0, 0),
        ({"planned_steps": 100, "step_s": 1.0, "compile_s": 40.0}, 140.0, 0),
        # 100 // 30 = 3 saves of 2 s (the run's last partial interval saves nothing)
        ({"planned_steps": 100, "step_s": 1.0, "save_every": 30, "save_stall_s": 2.0}, 106.0, 3),
        # a stall with no interval is not charged
        ({"planned_steps": 100, "step_s": 1.0, "save_every": 0, "save_stall_s": 2.0}, 100.0, 0),
        (
            {
                "planned_steps": 10,
                "step_s": 0.5,
                "compile_s": 3,
                "save_every": 5,
                "save_stall_s": 1,
            },
            10.0,
            2,
        ),
    ],
)
def test_train_time_parts(kwargs: dict, total_s: float, num_saves: int) -> None:
    t = train_time(**kwargs)
    assert t.total_s == pytest.approx(total_s)
    assert t.num_saves == num_saves
    assert t.total_h == pytest.approx(total_s / 3600)


@pytest.mark.parametrize(
    ("planned_steps", "planned_tokens", "tokens_per_step", "expected"),
    [
        (0, 10_000_000_000, 1_048_576, 9537),  # derived from tokens, rounded up
        (0, 1_048_576, 1_048_576, 1),  # exact
        (0, 1, 1_048_576, 1),  # less than a step is still one step
        (500, 10_000_000_000, 1_048_576, 500),  # an explicit planned_steps wins
    ],
)
def test_resolve_planned_steps(planned_steps, planned_tokens, tokens_per_step, expected) -> None:
    assert (
        resolve_planned_steps(
            planned_steps=planned_steps,
            planned_tokens=planned_tokens,
            tokens_per_step=tokens_per_step,
        )
        == expected
    )


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: resolve_planned_steps(planned_steps=-1, planned_tokens=1, tokens_per_step=1),
            r"planned_steps must be 0 \(derive from planned_tokens\).*got -1",
        ),
        (
            lambda: resolve_planned_steps(planned_steps=2.5, planned_tokens=1, tokens_per_step=1),
            "planned_steps must be 0",
        ),
        (
            lambda: planned_steps_for(planned_tokens=0, tokens_per_step=1),
            "planned_tokens must be a positive integer, got 0",
        ),
        (
            lambda: planned_steps_for(planned_tokens=10, tokens_per_step=0),
            "tokens_per_step must be a positive integer, got 0",
        ),
        (lambda: train_time(planned_steps=0, step_s=1.0), "planned_steps must be a positive"),
        (lambda: train_time(planned_steps=1, step_s=-1.0), "step_s must be >= 0 seconds, got -1"),
        (lambda: train_time(planned_steps=1, step_s=1.0, compile_s=-2), "compile_s must be >= 0"),
        (lambda: train_time(planned_steps=1, step_s=1.0, save_every=-1), "save_every must be 0"),
        (
            lambda: usd_per_1b_tokens(total_s=10, planned_tokens=10, usd_per_hour=0),
            "usd_per_hour must be > 0, got 0",
        ),
        (
            lambda: usd_per_1b_tokens(total_s=0, planned_tokens=10, usd_per_hour=1),
            "total_s must be > 0",
        ),
        (lambda: device_price("cpu", usd_per_hour=-1), "usd_per_hour must be >= 0"),
        (lambda: validate_prices({"H100": 0}), r"prices\['H100'\] must be a price in USD"),
        (lambda: validate_prices({"H100": "cheap"}), r"prices\['H100'\].*got 'cheap'"),
    ],
)
def test_bad_values_name_the_field(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


TABLE = {"H100": 2.0, "NVIDIA H100 80GB HBM3": 2.5, "H200": 3.0, "h100 nvl": 2.2}


@pytest.mark.parametrize(
    ("device", "usd_per_hour", "prices", "expected"),
    [
        ("NVIDIA H200", 4.0, TABLE, 4.0),  # an explicit hourly price wins over the table
        ("NVIDIA H100 80GB HBM3", 0.0, TABLE, 2.5),  # exact name
        ("nvidia h100 80gb hbm3", 0.0, TABLE, 2.5),  # case-insensitive
        ("NVIDIA H100 NVL", 0.0, TABLE, 2.2),  # the longest key in the name
        ("NVIDIA H100 PCIe", 0.0, TABLE, 2.0),
        ("NVIDIA H200", 0.0, TABLE, 3.0),
        ("NVIDIA A100-SXM4-80GB", 0.0, TABLE, None),  # not in the table: unknown, never guessed
        ("cpu", 0.0, None, None),  # no price at all: hours only
        ("", 0.0, TABLE, None),
    ],
)
def test_device_price(device: str, usd_per_hour: float, prices, expected) -> None:
    assert device_price(device, usd_per_hour=usd_per_hour, prices=prices) == expected
