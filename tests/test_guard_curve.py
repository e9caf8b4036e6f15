"""The numerics guard's curve runs on real CPU trials (tiny preset, in-process): a curve has exactly
the asked steps, the same seed trains the same batches whatever a speed knob says, the same math
raises no alarm, and the planted precision loss (trial.fault=coarse_weights) is caught."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sweeper.space.overrides import format_override
from sweeper.verify.guard_rules import check, tolerance, window_size
from train.trial.coarse import round_mantissa_
from train.trial.curve import curve_keys, loss_curve
from train.trial.measurement import run_trial

STEPS = 10


def _curve(make_config, tmp_path: Path, name: str, *, seed: int, extra: tuple[str, ...] = ()):
    keys = [format_override(k, v) for k, v in curve_keys(steps=STEPS, seed=seed).items()]
    cfg = make_config(*keys, "runtime.threads=1", *extra)
    result = run_trial(cfg, out_path=tmp_path / name / "trial.json")
    assert result["status"] == "complete", result["failure"]
    curve = loss_curve(result)
    assert curve is not None and len(curve) == STEPS
    return curve


def test_round_mantissa_keeps_three_bits_and_swallows_small_updates() -> None:
    t = torch.tensor([1.0, 1.07, -0.3, 0.0, 1.2e-3])
    round_mantissa_(t, 3)
    assert t.tolist() == pytest.approx([1.0, 1.125, -0.3125, 0.0, 0.001220703125])
    w = round_mantissa_(torch.tensor([0.02]), 3)
    assert torch.equal(round_mantissa_(w + 6e-4, 3), w)  # an AdamW-sized step is rounded away


@pytest.mark.slow  # four trials of 10 steps: ~25 s on a loaded 2-core CPU
def test_same_math_same_batches_no_alarm_and_the_planted_loss_is_caught(
    make_config, tmp_path: Path
) -> None:
    ref = _curve(make_config, tmp_path, "ref", seed=1337)
    other_seed = _curve(make_config, tmp_path, "seed2", seed=1338)
    # a speed knob (a data worker) leaves the batches and the math alone: the very same curve
    same = _curve(make_config, tmp_path, "workers", seed=1337, extra=("data.num_workers=1",))
    assert same == ref
    assert other_seed != ref
    tol = tolerance({1337: ref, 1338: other_seed}, k=2.0, floor=0.01, window=window_size(STEPS))
    assert tol.spread > 0
    assert check(same, ref, tol).passed
    coarse = _curve(make_config, tmp_path, "coarse", seed=1337,
                    extra=("trial.fault=coarse_weights",))  # fmt: skip
    verdict = check(coarse, ref, tol)
    assert not verdict.passed, verdict.reason
    assert coarse[-1] > ref[-1]  # it trains worse, not only differently
