"""The numerics guard's curve runs on real CPU trials (tiny preset, in-process): a curve has exactly
the asked steps, the same seed trains the same batches whatever a speed knob says, the same math
raises no alarm, and the planted precision loss (hooks.fault=coarse_weights) is caught."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sweeper.space.overrides import format_override
from sweeper.verify.guard_rules import check, descent, tolerance, window_size
from sweeper.verify.guard_text import check_text
from train.core.curve import curve_keys, loss_curve
from train.trial.coarse import round_mantissa_
from train.trial.measurement import run_trial

STEPS = 20  # the sweep's numerics_guard_steps: the curves cover the production warm-up (20 steps)


def _curve(
    make_config,
    tmp_path: Path,
    name: str,
    *,
    seed: int,
    extra: tuple[str, ...] = (),
    steps: int = STEPS,
) -> list[float]:
    keys = [format_override(k, v) for k, v in curve_keys(steps=steps, seed=seed).items()]
    cfg = make_config(*keys, "runtime.threads=1", *extra)
    result = run_trial(cfg, out_path=tmp_path / name / "trial.json")
    assert result["status"] == "complete", result["failure"]
    curve = loss_curve(result)
    assert curve is not None and len(curve) == steps
    return curve


def test_a_config_that_diverges_at_its_peak_lr_trains_under_the_production_schedule(
    make_config, tmp_path: Path
) -> None:
    # optim.lr=0.05 on the tiny preset: stepped at the peak from step 0 (no warm-up, as every trial
    # step ran before; gpt2-xl's curves rose 11.1 -> 60 so on the H200) the loss rises; under the
    # production schedule (a 20-step linear warm-up) the same steps fall: a reference that trains
    lr = ("optim.lr=0.05", "optim.min_lr=0.0")
    peak = _curve(
        make_config, tmp_path, "peak", seed=1337, steps=6, extra=(*lr, "optim.warmup_steps=0")
    )
    warm = _curve(
        make_config, tmp_path, "warm", seed=1337, steps=6, extra=(*lr, "optim.warmup_steps=20")
    )
    assert not descent({1337: peak}, spread=0.0, window=2).trains, peak
    assert peak[-1] > peak[0] + 0.5, peak
    assert descent({1337: warm}, spread=0.0, window=2).trains, warm
    assert warm == sorted(warm, reverse=True), warm  # every step lower than the one before


def test_round_mantissa_keeps_three_bits_and_swallows_small_updates() -> None:
    t = torch.tensor([1.0, 1.07, -0.3, 0.0, 1.2e-3])
    round_mantissa_(t, 3)
    assert t.tolist() == pytest.approx([1.0, 1.125, -0.3125, 0.0, 0.001220703125])
    w = round_mantissa_(torch.tensor([0.02]), 3)
    assert torch.equal(round_mantissa_(w + 6e-4, 3), w)  # an AdamW-sized step is rounded away


@pytest.mark.slow  # four trials of 20 steps: ~30 s on a loaded 2-core CPU
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
    # at the production schedule's lrs the reference trains: a curve the guard can judge against
    assert descent({1337: ref, 1338: other_seed}, spread=tol.spread, window=tol.window).trains
    assert check(same, ref, tol).passed
    coarse = _curve(
        make_config, tmp_path, "coarse", seed=1337, extra=("hooks.fault=coarse_weights",)
    )
    verdict = check(coarse, ref, tol)
    assert not verdict.passed, check_text(verdict)
    assert coarse[-1] > ref[-1]  # it trains worse, not only differently
