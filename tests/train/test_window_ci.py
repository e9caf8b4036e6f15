"""The early stop of a trial's measured window (train/core/window_ci.py): the t quantile, the
interval, the first step it may end at, the stop rule and its forward run for the plan (tables);
a real tiny trial that ends on it; pruning at equal measured steps."""

from __future__ import annotations

import math

import pytest

from train.core.window_ci import (
    ci_reached,
    first_ci_step,
    relative_half_width,
    steps_to_ci,
    t_quantile,
)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 10, 19, 30, 100])
@pytest.mark.parametrize("p", [0.9, 0.95, 0.975, 0.995])
def test_t_quantile_matches_scipy(p, df) -> None:
    stats = pytest.importorskip("scipy.stats")
    # the expansion is within 0.2% where the window uses it (95% two-sided: p = 0.975), 1% in
    # the far tail at 3 degrees of freedom
    rel = 2e-3 if p <= 0.975 else 1e-2
    assert t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=rel)


@pytest.mark.parametrize(("p", "df"), [(0.5, 3), (1.0, 3), (0.95, 0)])
def test_t_quantile_refuses_bad_arguments(p, df) -> None:
    with pytest.raises(ValueError, match=r"0\.5 < p < 1"):
        t_quantile(p, df)


@pytest.mark.parametrize(
    ("times", "half"),
    [
        ([1.0], math.inf),  # no spread from one step
        ([1.0, 1.0, 1.0], 0.0),
        # mean 1, sd 0.1, n 4: t(0.975, 3) = 3.182 x 0.1 / 2 = 0.159
        ([0.9, 1.1, 0.9, 1.1], 3.182 * math.sqrt(4 / 3) * 0.1 / 2),
    ],
)
def test_relative_half_width(times, half) -> None:
    assert relative_half_width(times) == pytest.approx(half, rel=2e-3)


@pytest.mark.parametrize(
    ("ci_min", "every", "max_steps", "first"),
    [
        (3, 0, 20, 3),  # no checkpoint: ci_min_steps
        (3, 6, 20, 6),  # the window measures its first save before it may end
        (3, 2, 20, 3),
        (3, 30, 20, 3),  # a save past max_steps is never measured: ignored
        (2, 0, 20, 2),
        (8, 0, 5, 5),  # never past max_steps
    ],
)
def test_first_ci_step(ci_min, every, max_steps, first) -> None:
    got = first_ci_step(ci_min_steps=ci_min, checkpoint_every=every, max_steps=max_steps)
    assert got == first


TIGHT = [1.00, 1.01, 0.99, 1.00, 1.005]  # CV ~0.8%
WIDE = [1.0, 1.3, 0.8, 1.2, 0.9]  # CV ~20%


@pytest.mark.parametrize(
    ("times", "target", "first", "stop"),
    [
        (TIGHT, 0.02, 3, True),
        (TIGHT[:3], 0.02, 3, False),  # sd 1%: t(2) = 4.30 x 1% / sqrt(3) = 2.48% > 2%
        ([1.0, 1.005, 0.995], 0.02, 3, True),  # sd 0.5%: 1.24%
        (TIGHT[:2], 0.02, 3, False),  # before the first step the rule may end at
        (TIGHT, 0.0, 3, False),  # off
        (WIDE, 0.02, 3, False),
        (WIDE, 0.5, 3, True),
    ],
)
def test_ci_reached(times, target, first, stop) -> None:
    assert ci_reached(times, target_ci=target, first_step=first) is stop


@pytest.mark.parametrize(
    ("cv", "target", "first", "max_steps", "steps"),
    [
        (0.01, 0.02, 3, 20, 4),  # t(3) x 1% / 2 = 1.59% <= 2%; n = 3 gives 2.48%
        (0.005, 0.02, 3, 20, 3),  # 4.30 x 0.5% / 1.73 = 1.24%
        (0.10, 0.02, 3, 20, 20),  # never within 2% in 20 steps: max_steps
        (0.01, 0.02, 6, 20, 6),  # not before the first save
        (0.01, 0.0, 3, 20, 20),  # off: the window runs to its maximum
    ],
)
def test_steps_to_ci(cv, target, first, max_steps, steps) -> None:
    assert steps_to_ci(cv, target_ci=target, first_step=first, max_steps=max_steps) == steps


# ---- a real tiny trial's window ---------------------------------------------------------------


def _measure(make_config, *overrides: str, reporter=None) -> dict:
    from train.run.loop import build_session
    from train.trial.measurement import ProgressFile, measure

    s = build_session(make_config(*overrides))
    try:
        return measure(s, reporter=reporter, progress=ProgressFile(""))
    finally:
        s.batches.close()


@pytest.mark.parametrize(
    ("overrides", "spread", "steps", "by"),
    [
        # steps as tight as asked: the window ends at ci_min_steps
        (("trial.target_ci=0.02",), 0.0, 3, "target_ci"),
        (("trial.target_ci=0.02", "trial.ci_min_steps=4"), 0.0, 4, "target_ci"),
        # not before the first save the window is meant to measure
        (("trial.target_ci=0.02", "checkpoint.every_steps=5"), 0.0, 5, "target_ci"),
        (("trial.target_ci=0.02",), 0.5, 8, "max_steps"),  # never tight: the maximum
        (("trial.target_ci=0",), 0.0, 8, "max_steps"),  # off
    ],
)
def test_the_window_ends_on_the_interval(
    make_config, monkeypatch, overrides, spread, steps, by
) -> None:
    # the step times of this loaded VM wander 10-50%: the interval's width is planted (the rule
    # itself is the tables above); the window's wiring is what runs for real
    import train.core.window_ci as rule

    monkeypatch.setattr(rule, "relative_half_width", lambda times, **kw: spread)
    raw = _measure(
        make_config, "trial.max_steps=8", "trial.min_steps=8", "trial.max_seconds=1000", *overrides
    )
    assert len(raw["step_times"]) == steps
    assert raw["window_stop"]["by"] == by and raw["window_stop"]["steps"] == steps


def test_prune_reports_carry_the_measured_step_index(make_config) -> None:
    """Warm-up steps are never counted: the reports come at measured steps 2, 4, 6, whichever
    rule ends the window, so trials are compared at equal measured steps."""
    steps: list[int] = []

    class Recorder:
        def report(self, *, step: int, value: float) -> bool:
            steps.append(step)
            return False

    _measure(
        make_config,
        "trial.warmup_steps=3",
        "trial.report_every=2",
        "trial.max_steps=6",
        "trial.min_steps=6",
        reporter=Recorder(),
    )
    assert steps == [2, 4, 6]


def test_the_pruner_compares_trials_at_equal_measured_steps(tmp_path) -> None:
    """A trial that slowed down (its value at step 6 below its value at step 3) sets the median
    at each step apart: a later trial is judged against the value at its own measured step."""
    import optuna

    from train.core.pruning import PRUNER_ATTR, StudyReporter

    storage = f"sqlite:///{tmp_path / 'o.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    study.set_user_attr(
        PRUNER_ATTR,
        {"name": "MedianPruner", "kwargs": {"n_startup_trials": 1, "n_warmup_steps": 0}},
    )
    first = study.ask()
    first.report(100.0, 3)
    first.report(50.0, 6)
    study.tell(first, 60.0)

    def verdict(step: int, value: float) -> bool:
        trial = study.ask()
        reporter = StudyReporter(storage=storage, study_name="s", trial_id=trial._trial_id)
        return reporter.report(step=step, value=value)

    assert verdict(3, 80.0) is True  # below the 100 measured at step 3
    assert verdict(6, 80.0) is False  # above the 50 measured at step 6
