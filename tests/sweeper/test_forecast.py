"""The one forecast of a trial's wall (sweeper/forecast/) against the trials it was measured from,
and its cost table: pure, hand arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.forecast import compile_s, costs_for, setup_s, trial_time
from sweeper.forecast.costs import (
    BLOCK_UNIT_LAYERS,
    FLOAT8_BLOCK_EXTRA_SHARE,
    FLOAT8_WARM_SHARE,
    GENERIC,
    GPU_DEFAULT,
    WARM_COMPILE_SHARE,
)
from sweeper.space.limits import predict_step, trial_limits
from train.core.compile_graphs import flat

REPO = Path(__file__).resolve().parents[2]
H200_RUN = REPO / "docs" / "gpu" / "2026-11-26-h200"
H200 = "NVIDIA H200"


def forecast_of(result: dict) -> float:
    """The forecast wall of the trial that wrote `result`, from its config alone (the step from the
    arithmetic, not the measured one) and whether its graph was in the compile cache."""
    cfg = flat(result["config"])
    step = predict_step(cfg, device_name=H200, device_type="cuda", bf16_supported=True)
    warm = result["compile"]["cache"]["state"] == "hit"
    return trial_time(
        cfg,
        step.predicted_s,
        device_type="cuda",
        device_name=H200,
        num_params=step.num_params,
        warm=warm,
    ).total_s


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("result-0.json", "search trial, micro-batch 16, cold compile"),
        ("result-1.json", "search trial, micro-batch 32, cold compile"),
        ("result-2.json", "race run of trial 0, real full steps, compile from the cache"),
        ("result-3.json", "race run of trial 1, real full steps, compile from the cache"),
        ("f8_tensorwise.json", "float8 tensorwise trial, micro-batch 32, cold compile"),
    ],
)
def test_the_forecast_is_within_15_percent_of_the_h200_runs(name: str, what: str) -> None:
    result = json.loads((H200_RUN / name).read_text())
    measured = result["wall_s"]
    predicted = forecast_of(result)
    assert predicted == pytest.approx(measured, rel=0.15), (what, predicted, measured)


def test_the_limits_expectation_is_the_forecast() -> None:
    # one forecast: the trial limits' expectation is trial_time's, nothing of their own
    result = json.loads((H200_RUN / "result-0.json").read_text())
    cfg = flat(result["config"])
    limits = trial_limits(cfg, device_name=H200, device_type="cuda", bf16_supported=True)
    assert limits.expected.total_s == pytest.approx(forecast_of(result))
    # and a float8 graph's allowance covers its measured cold compile (163 s)
    f8 = flat(json.loads((H200_RUN / "f8_tensorwise.json").read_text())["config"])
    bound = trial_limits(f8, device_name=H200, device_type="cuda", bf16_supported=True)
    assert bound.timeout_s > 3 * 163


@pytest.mark.parametrize(
    ("device", "mode", "float8", "warm", "seconds"),
    [
        (H200, "default", False, False, 62.9),  # the mean of 68.2 and 57.5 s
        (H200, "default", False, True, 5.2),  # a cache hit
        (H200, "default", True, False, 163.2),  # float8 tensorwise, cold
        # no AOTAutograd cache entry: its kernels from the cache, autograd traced again
        (H200, "default", True, True, 163.2 * FLOAT8_WARM_SHARE),
        (H200, "none", True, False, 0.0),
        # a GPU without costs of its own: the H200's
        ("NVIDIA H100 80GB HBM3", "default", False, False, 62.9),
        ("NVIDIA H100 80GB HBM3", "default", False, True, 5.2),
        ("NVIDIA H100 80GB HBM3", "max-autotune", False, False, 3 * 62.9),
        ("", "default", False, False, 87.0),  # a CPU: generic, 87/48 s a layer
        ("", "default", False, True, 87.0 * WARM_COMPILE_SHARE),
    ],
)
def test_compile_costs(device, mode, float8, warm, seconds) -> None:
    got = compile_s(costs_for(device), mode=mode, n_layer=48, float8=float8, warm=warm)
    assert got == pytest.approx(seconds, rel=1e-3)


BLOCK_H200 = 62.9 * BLOCK_UNIT_LAYERS / 48  # a bf16 block's cold compile on the H200


@pytest.mark.parametrize(
    ("float8", "warm", "seconds"),
    [
        (False, False, BLOCK_H200),
        (False, True, 5.2 * BLOCK_UNIT_LAYERS / 48),
        # float8's extra per traced layer: block keeps FLOAT8_BLOCK_EXTRA_SHARE of the 2.6x's 1.6
        (True, False, BLOCK_H200 * (1 + (163.2 / 62.9 - 1) * FLOAT8_BLOCK_EXTRA_SHARE)),
        (True, True, BLOCK_H200 * (1 + (163.2 / 62.9 - 1) * FLOAT8_BLOCK_EXTRA_SHARE) * 0.447),
    ],
)
def test_block_compile_costs_on_the_h200(float8: bool, warm: bool, seconds: float) -> None:
    got = compile_s(
        costs_for(H200), mode="default", n_layer=48, float8=float8, warm=warm, unit="block"
    )
    assert got == pytest.approx(seconds, rel=1e-3)
    # the CPU measurements the shares come from (docs/bench/float8_cache-2026-11-28-cpu.txt)
    assert 1.40 < 1 + (163.2 / 62.9 - 1) * FLOAT8_BLOCK_EXTRA_SHARE < 1.45
    assert round(FLOAT8_WARM_SHARE, 3) == 0.447


def test_setup_costs() -> None:
    assert setup_s(costs_for("nvidia h200"), device_type="cuda", n_layer=48) == 26.6
    assert costs_for("NVIDIA H100 80GB HBM3") is GPU_DEFAULT  # the H200's
    assert costs_for("Some GPU the chip table lacks") is GPU_DEFAULT
    assert setup_s(GPU_DEFAULT, device_type="cuda", n_layer=48) == 26.6
    assert costs_for("") is GENERIC  # a CPU
    assert setup_s(GENERIC, device_type="cpu", n_layer=2) == pytest.approx(2 + 0.6 * 2)
