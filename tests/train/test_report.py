"""The child's reporter: running tokens/s reach the study in its own units, so the median pruner
stops the slow trials of a minimize study too, never the fast ones."""

from __future__ import annotations

import optuna
import pytest

from train.core.pruning import OBJECTIVE_ATTR, PRUNER_ATTR, StudyReporter, study_value


@pytest.mark.parametrize(
    ("tokens_per_s", "direction", "objective", "expected"),
    [
        (1000.0, "maximize", None, 1000.0),
        (1000.0, "maximize", {"name": "tokens_per_s"}, 1000.0),
        # 10,000 planned steps of 4,096 tokens at 1,000 tokens/s
        (1000.0, "minimize", {"name": "time_to_train", "planned_tokens": 40_960_000}, 40_960.0),
        (2000.0, "minimize", {"name": "time_to_train", "planned_tokens": 40_960_000}, 20_480.0),
        (1000.0, "minimize", None, 0.001),  # seconds per token when nothing is planned
        (0.0, "minimize", None, float("inf")),
    ],
)
def test_study_value(tokens_per_s, direction, objective, expected) -> None:
    assert study_value(tokens_per_s, direction=direction, objective=objective) == pytest.approx(
        expected
    )


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_the_median_pruner_stops_the_slower_trial_in_either_direction(tmp_path, direction):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=storage, study_name="s", direction=direction)
    study.set_user_attr(
        PRUNER_ATTR,
        {"name": "MedianPruner", "kwargs": {"n_startup_trials": 1, "n_warmup_steps": 0}},
    )
    study.set_user_attr(OBJECTIVE_ATTR, {"name": "time_to_train", "planned_tokens": 1_000_000})

    def reporter(trial: optuna.Trial) -> StudyReporter:
        return StudyReporter(storage=storage, study_name="s", trial_id=trial._trial_id)

    first = study.ask()
    assert reporter(first).report(step=3, value=1000.0) is False  # nothing to compare with yet
    study.tell(first, 1000.0)
    slow, fast = study.ask(), study.ask()
    assert reporter(slow).report(step=3, value=500.0) is True
    assert reporter(fast).report(step=3, value=2000.0) is False
