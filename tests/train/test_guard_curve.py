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


def test_two_seeds_in_one_process_train_the_curves_of_two_fresh_processes(
    make_config, tmp_path: Path
) -> None:
    """trial.seeds=2: the second seed's weights are drawn again in place, with a new optimizer
    and its own batches; its curve is the very curve a fresh process of that seed trains."""
    steps = 4
    keys = [format_override(k, v) for k, v in curve_keys(steps=steps, seed=1337).items()]
    cfg = make_config(*keys, "runtime.threads=1", "trial.seeds=2")
    both = run_trial(cfg, out_path=tmp_path / "both" / "trial.json")
    assert both["status"] == "complete", both["failure"]
    (more,) = both["loss"]["more_seeds"]
    assert more["seed"] == 1338 and "failed" not in more and more["wall_s"] > 0
    first = _curve(make_config, tmp_path, "first", seed=1337, steps=steps)
    second = _curve(make_config, tmp_path, "second", seed=1338, steps=steps)
    assert loss_curve(both) == first
    assert more["steps"] == second and len(more["lr"]) == steps
    assert second != first


def test_a_second_seed_that_goes_non_finite_keeps_the_first_seeds_curve(
    make_config, tmp_path: Path, monkeypatch
) -> None:
    import train.trial.seeds as seeds_mod

    real_reseed = seeds_mod.reseed

    def poisoned(s, seed):  # the second seed's weights hold a NaN: its first loss is NaN
        s = real_reseed(s, seed)
        with torch.no_grad():
            s.raw_model.lm_head.weight[0, 0] = float("nan")
        return s

    monkeypatch.setattr(seeds_mod, "reseed", poisoned)
    keys = [format_override(k, v) for k, v in curve_keys(steps=3, seed=7).items()]
    result = run_trial(make_config(*keys, "trial.seeds=3"), out_path=tmp_path / "t.json")
    assert result["status"] == "complete", result["failure"]
    assert len(loss_curve(result) or []) == 3
    failed = result["loss"]["more_seeds"]
    assert [c["seed"] for c in failed] == [8, 9]  # a non-finite seed does not stop the next
    assert all("nan" in c["failed"] for c in failed) and all("steps" not in c for c in failed)


@pytest.mark.parametrize("unit", ["model", "block"])
def test_a_compiled_second_seed_reuses_the_first_seeds_graphs(
    make_config, tmp_path: Path, unit: str
) -> None:
    keys = [format_override(k, v) for k, v in curve_keys(steps=3, seed=3).items()]
    # 3 layers: a graph of its own (dynamo reuses a graph across models of one shape in a
    # process, and test_trial's compile test must compile the 2-layer preset cold)
    cfg = make_config(
        *keys,
        "trial.seeds=2",
        "model.n_layer=3",
        "runtime.compile=default",
        f"runtime.compile_unit={unit}",
    )
    result = run_trial(cfg, out_path=tmp_path / "t.json")
    assert result["status"] == "complete", result["failure"]
    assert result["compile_s"] > 0  # the first seed compiled ...
    (more,) = result["loss"]["more_seeds"]
    assert more["frames_compiled"] == 0, more  # ... the second ran the same graphs
    assert len(more["steps"]) == 3 and more["steps"] != loss_curve(result)
