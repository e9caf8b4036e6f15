"""Objective arithmetic: tokens/s and the predicted wall time of the production run."""

from __future__ import annotations

import pytest

from sweeper.study.objective import (
    ObjectiveConfig,
    direction,
    objective_value,
    save_stall_s,
    searched_interval_warning,
    steady_step_time_s,
)


def _result(
    *,
    p50: float = 0.1,
    n: int = 20,
    compile_s: float | None = 0.0,
    checkpoint_s: tuple[float, ...] = (),
    every_steps: int = 0,
    mode: str = "sync",
    tokens_per_s: float | None = 1000.0,
    **step_extra: float,
) -> dict:
    return {
        "status": "complete",
        "tokens_per_s": tokens_per_s,
        "compile_s": compile_s,
        "step_time_s": {"p50": p50, "n": n, **step_extra},
        "checkpoint_s": list(checkpoint_s),
        "config": {"checkpoint": {"every_steps": every_steps, "mode": mode}},
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [("tokens_per_s", "maximize"), ("time_to_train", "minimize")],
)
def test_direction(name: str, expected: str) -> None:
    assert direction(ObjectiveConfig(name=name)) == expected


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "loss"}, "objective.name"),
        ({"planned_steps": 0}, "objective.planned_steps"),
        ({"planned_steps": 2.5}, "objective.planned_steps"),
        ({"planned_checkpoint_every": -1}, "objective.planned_checkpoint_every"),
    ],
)
def test_config_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ObjectiveConfig(**kwargs)


def test_tokens_per_s_is_the_result_value() -> None:
    assert objective_value(_result(tokens_per_s=1234.5), ObjectiveConfig()) == 1234.5


@pytest.mark.parametrize(
    ("name", "result", "match"),
    [
        ("tokens_per_s", _result(tokens_per_s=None), "tokens_per_s"),
        ("time_to_train", {"status": "failed", "step_time_s": None}, "step_time_s.p50"),
    ],
)
def test_unscorable_result_raises(name: str, result: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        objective_value(result, ObjectiveConfig(name=name))


# Hand-computed: compile_s + planned_steps * steady_step_s + (planned_steps // interval) * stall.
@pytest.mark.parametrize(
    ("result", "planned_steps", "planned_every", "expected"),
    [
        # a 40 s compile doubles the time of a 100-step run ...
        (_result(p50=0.4, compile_s=40.0), 100, 0, 40 + 100 * 0.4),
        # ... and is 1% of a 10,000-step run
        (_result(p50=0.4, compile_s=40.0), 10_000, 0, 40 + 10_000 * 0.4),
        # eager, no compile time recorded: counts as 0
        (_result(p50=0.25, compile_s=None), 1000, 0, 250.0),
        # trial's own interval (100): 10_000 // 100 = 100 saves of median 2.0 s
        (_result(p50=0.1, checkpoint_s=(1.0, 2.0, 9.0), every_steps=100), 10_000, 0, 1000 + 200),
        # planned interval (1000) overrides the trial's: 10 saves
        (_result(p50=0.1, checkpoint_s=(2.0,), every_steps=5), 10_000, 1000, 1000 + 20),
        # planned interval that does not divide: 10_000 // 3000 = 3 saves
        (_result(p50=0.1, checkpoint_s=(2.0,), every_steps=5), 10_000, 3000, 1000 + 6),
        # no checkpoints anywhere: no stall term even if the trial measured some
        (_result(p50=0.1, checkpoint_s=(2.0,), every_steps=0), 10_000, 0, 1000.0),
        # interval set but the trial never saved: stall term left out (warning)
        (_result(p50=0.1, every_steps=50), 10_000, 0, 1000.0),
        # async, saved every 3 trial steps: the later saves waited on the write before (1.5 s);
        # at a planned 1000-step interval nothing is in flight, each save costs the first's 0.2 s
        (
            _result(p50=0.1, checkpoint_s=(0.2, 1.5, 1.5), every_steps=3, mode="async"),
            10_000,
            1000,
            1000 + 10 * 0.2,
        ),
        # ... while sync saves always write the whole file: the median
        (
            _result(p50=0.1, checkpoint_s=(0.2, 1.5, 1.5), every_steps=3),
            10_000,
            1000,
            1000 + 10 * 1.5,
        ),
        # async at its own interval: the waits are what it will see, the median
        (
            _result(p50=0.1, checkpoint_s=(0.2, 1.5, 1.5), every_steps=100, mode="async"),
            10_000,
            0,
            1000 + 100 * 1.5,
        ),
    ],
)
def test_time_to_train_table(
    result: dict, planned_steps: int, planned_every: int, expected: float
) -> None:
    cfg = ObjectiveConfig(
        name="time_to_train", planned_steps=planned_steps, planned_checkpoint_every=planned_every
    )
    assert objective_value(result, cfg) == pytest.approx(expected)


def test_compile_time_matters_only_for_short_runs() -> None:
    fast_compiled = _result(p50=0.30, compile_s=40.0)
    eager = _result(p50=0.40, compile_s=0.0)
    short = ObjectiveConfig(name="time_to_train", planned_steps=100)
    long = ObjectiveConfig(name="time_to_train", planned_steps=10_000)
    # 100 steps: 70 s compiled vs 40 s eager -> eager wins; 10,000: 3040 s vs 4000 s -> compile wins
    assert objective_value(eager, short) < objective_value(fast_compiled, short)
    assert objective_value(fast_compiled, long) < objective_value(eager, long)


# Step times include save stalls; the steady step must not carry them (no double counting).
@pytest.mark.parametrize(
    ("result", "expected"),
    [
        # the trial recorded the median of unsaved steps: used as is
        (_result(p50=0.5, checkpoint_s=(0.4,) * 20, p50_no_checkpoint=0.1), 0.1),
        # 2 saves in 20 steps: the median is an unsaved step, nothing subtracted
        (_result(p50=0.1, n=20, checkpoint_s=(2.0, 2.0)), 0.1),
        # every step saved (every_steps=1): p50 is a stalled step, the whole median stall comes off
        (_result(p50=0.5, n=10, checkpoint_s=(0.4,) * 10), 0.1),
        # 6 of 10 steps saved: sorted positions 4..9 stalled, median (pos 4.5) fully stalled
        (_result(p50=0.5, n=10, checkpoint_s=(0.4,) * 6), 0.1),
        # 5 of 10 saved: median interpolates halfway between an unsaved and a saved step
        (_result(p50=0.3, n=10, checkpoint_s=(0.4,) * 5), 0.1),
        # 5 of 9 saved (odd n, pos 4 = first stalled): full stall subtracted
        (_result(p50=0.5, n=9, checkpoint_s=(0.4,) * 5), 0.1),
        # never below zero
        (_result(p50=0.1, n=4, checkpoint_s=(5.0,) * 4), 0.0),
    ],
)
def test_steady_step_time_table(result: dict, expected: float) -> None:
    assert steady_step_time_s(result) == pytest.approx(expected)


def test_every_step_checkpoint_is_not_double_counted() -> None:
    # 0.1 s compute + 0.4 s save on every step: 100 planned steps must take 100 * 0.5 = 50 s
    result = _result(p50=0.5, n=10, checkpoint_s=(0.4,) * 10, every_steps=1)
    cfg = ObjectiveConfig(name="time_to_train", planned_steps=100)
    assert objective_value(result, cfg) == pytest.approx(50.0)


# steady step 0.1 s; async saves (0.2, 1.5, 1.5) every 3 steps: a 0.2 s snapshot, and later saves
# waited 1.3 s on the write before, which so took ~1.3 + 3 x 0.1 = 1.6 s
@pytest.mark.parametrize(
    ("saves", "mode", "trial_every", "planned_every", "expected"),
    [
        ((), "sync", 3, 1000, None),  # nothing measured: cannot be priced
        ((0.2, 1.5, 1.5), "sync", 3, 1000, 1.5),  # a sync save writes the whole file each time
        ((0.2, 1.5, 1.5), "async", 3, 1000, 0.2),  # 1000 steps cover the write: no wait
        ((0.2, 1.5, 1.5), "async", 3, 3, 1.5),  # the trial's own interval: the measured median
        ((0.2, 1.5, 1.5), "async", 3, 10, 0.2 + 0.6),  # 10 steps cover 1.0 s of the 1.6 s write
        ((0.2, 1.5, 1.5), "async", 6, 3, 0.2 + 1.6),  # write 1.3 + 0.6, 0.3 covered
        ((0.2,), "async", 3, 1000, 0.2),  # one save: the snapshot
    ],
)
def test_save_stall_at_the_planned_interval(saves, mode, trial_every, planned_every, expected):
    result = _result(checkpoint_s=saves, every_steps=trial_every, mode=mode)
    got = save_stall_s(result, planned_every=planned_every)
    assert got == (None if expected is None else pytest.approx(expected))


# the save measured once in the sweep (trial.save_record): a 0.2 s stall, its write 1.6 s in all;
# the trial's own window saved nothing, its steady step 0.1 s
@pytest.mark.parametrize(
    ("mode", "planned_every", "expected"),
    [
        ("sync", 1000, 0.2),  # a sync save blocks for its (whole) measured stall
        ("async", 1000, 0.2),  # 1000 steps cover the write: the snapshot only
        ("async", 10, 0.2 + 0.4),  # 10 steps cover 1.0 s of the 1.4 s left of the write
        ("async", 0, 1.6),  # saves back to back: the whole write
    ],
)
def test_a_save_measured_once_is_priced_at_the_planned_interval(mode, planned_every, expected):
    once = {"stall_s": 0.2, "write_s": 1.6, "bytes": 10, "mode": mode, "here": False}
    result = {**_result(every_steps=3, mode=mode), "checkpoint_save": once}
    assert save_stall_s(result, planned_every=planned_every) == pytest.approx(expected)
    cfg = ObjectiveConfig(name="time_to_train", planned_steps=1000, planned_checkpoint_every=100)
    # 1000 steps of 0.1 s and 10 saves: the stall is in the price although no step held one
    assert objective_value(result, cfg) == pytest.approx(
        100.0 + 10 * save_stall_s(result, planned_every=100)
    )


@pytest.mark.parametrize(
    ("name", "planned_every", "searched", "warns"),
    [
        ("time_to_train", 0, {"checkpoint.every_steps"}, True),
        ("time_to_train", 1000, {"checkpoint.every_steps"}, False),  # priced at the plan
        ("time_to_train", 0, {"checkpoint.mode"}, False),
        ("tokens_per_s", 0, {"checkpoint.every_steps"}, False),
    ],
)
def test_searching_the_interval_without_a_plan_warns(name, planned_every, searched, warns):
    cfg = ObjectiveConfig(name=name, planned_checkpoint_every=planned_every)
    assert (searched_interval_warning(cfg, searched) is not None) == warns


def test_time_to_train_is_the_cost_arithmetic() -> None:
    """One function prices a run: the objective is train.core.cost.train_time's total."""
    from sweeper.study.objective import result_train_time
    from train.core.cost import train_time

    cfg = ObjectiveConfig(name="time_to_train", planned_steps=1000, planned_checkpoint_every=100)
    result = _result(p50=0.5, compile_s=30.0, checkpoint_s=(2.0, 2.0, 4.0), every_steps=5)
    t = result_train_time(result, cfg)
    assert (t.planned_steps, t.num_saves, t.compile_s) == (1000, 10, 30.0)
    assert t.checkpoint_s == pytest.approx(10 * 2.0)  # the median sync save, 10 times
    expected = train_time(
        planned_steps=1000, step_s=0.5, compile_s=30.0, save_every=100, save_stall_s=2.0
    )
    assert objective_value(result, cfg) == pytest.approx(expected.total_s) == t.total_s
    assert t.total_s == pytest.approx(30.0 + 500.0 + 20.0)
