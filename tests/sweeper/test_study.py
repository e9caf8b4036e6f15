"""sweeper/study/optuna_study.py: which trials a re-proposed point reuses, and what counts against
the budget."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweeper.study.optuna_study import DUPLICATE_ATTR, count_finished, find_twin

DISTS = {"mb": CategoricalDistribution([4, 8, 16])}


def told(study: optuna.Study, mb: int, state: TrialState, value=None, **attrs) -> int:
    study.enqueue_trial({"mb": mb})
    trial = study.ask(DISTS)
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
    return trial.number


@pytest.fixture
def study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(direction="maximize")


def test_find_twin_returns_the_first_measurement_of_the_same_point(study):
    first = told(study, 8, TrialState.COMPLETE, 100.0)
    told(study, 8, TrialState.COMPLETE, 90.0)
    told(study, 4, TrialState.PRUNED)
    assert find_twin(study, {"mb": 8}, number=99).number == first
    assert find_twin(study, {"mb": 4}, number=99).state == TrialState.PRUNED
    assert find_twin(study, {"mb": 16}, number=99) is None
    assert find_twin(study, {"mb": 8}, number=first).number != first  # never itself


def test_interrupted_and_duplicate_trials_are_never_twins(study):
    told(study, 8, TrialState.FAIL, failure_kind="interrupted")
    assert find_twin(study, {"mb": 8}, number=99) is None
    told(study, 16, TrialState.COMPLETE, 5.0, **{DUPLICATE_ATTR: 0})
    assert find_twin(study, {"mb": 16}, number=99) is None


@pytest.mark.parametrize(
    ("trials", "expected"),
    [
        ([], 0),
        ([(8, TrialState.COMPLETE, {})], 1),
        ([(8, TrialState.COMPLETE, {}), (4, TrialState.PRUNED, {})], 2),
        ([(8, TrialState.FAIL, {"failure_kind": "crash"})], 1),  # a failure cost a trial
        ([(8, TrialState.FAIL, {"failure_kind": "interrupted"})], 0),  # queued again
        ([(8, TrialState.COMPLETE, {}), (8, TrialState.COMPLETE, {DUPLICATE_ATTR: 0})], 1),
    ],
)
def test_count_finished(study, trials, expected):
    for mb, state, attrs in trials:
        told(study, mb, state, 1.0, **attrs)
    assert count_finished(study) == expected


def test_recover_interrupted_fails_and_requeues_only_orphans(tmp_path):
    """A RUNNING trial whose owner on this host exited is an orphan; a live owner's, or one on
    another host whose heartbeat is fresh, is kept."""
    import os
    import socket

    from sweeper.study.optuna_study import (
        OWNER_ATTR,
        REQUEUED_ATTR,
        StudySpec,
        open_study,
        recover_interrupted,
    )
    from tests.servers import dead_pid

    host = socket.gethostname()
    spec = StudySpec(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="r", direction="maximize")
    study = open_study(spec)
    owners = [f"{host}:{dead_pid()}", f"{host}:{os.getppid()}", "another-host:123"]
    for mb, owner in zip((4, 8, 16), owners, strict=True):
        study.enqueue_trial({"mb": mb})
        study.ask(DISTS).set_user_attr(OWNER_ATTR, owner)
    assert recover_interrupted(study) == [0]
    failed = study.trials[0]
    assert failed.state == TrialState.FAIL and failed.user_attrs["failure_kind"] == "interrupted"
    assert [t.state for t in study.trials[1:3]] == [TrialState.RUNNING] * 2
    queued = study.trials[3]
    assert queued.state == TrialState.WAITING and queued.user_attrs[REQUEUED_ATTR] == 0
    assert queued.system_attrs["fixed_params"] == {"mb": 4}


def _race_then_real(errors: list[Exception]):
    """An RDBStorage that raises each of `errors` once, as a process losing the race to create
    Optuna's tables does, then opens the real storage."""
    real = optuna.storages.RDBStorage

    def make(*args, **kwargs):
        if errors:
            raise errors.pop(0)
        return real(*args, **kwargs)

    return make


def _table_exists() -> Exception:
    import sqlite3

    from sqlalchemy.exc import OperationalError

    return OperationalError(
        "CREATE TABLE trial_intermediate_values (...)",
        {},
        sqlite3.OperationalError("table trial_intermediate_values already exists"),
    )


def test_a_fresh_sqlite_storage_survives_losing_the_race_to_create_its_tables(
    tmp_path, monkeypatch
) -> None:
    """A reader (a dashboard, a second worker, a test polling the study) that opens a fresh SQLite
    file while the sweep creates Optuna's tables makes the sweep's CREATE TABLE fail with 'table
    ... already exists' (seen in CI, 2026-11-26): the sweep opens it again instead of dying."""
    from sweeper.study import optuna_study as study_mod

    monkeypatch.setattr(study_mod.time, "sleep", lambda s: None)
    monkeypatch.setattr(optuna.storages, "RDBStorage", _race_then_real([_table_exists()]))
    storage = study_mod.make_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval_s=10)
    monkeypatch.undo()  # optuna checks isinstance(storage, RDBStorage)
    assert optuna.create_study(storage=storage, study_name="s").study_name == "s"


def test_a_locked_or_broken_storage_is_not_taken_for_the_race(tmp_path, monkeypatch) -> None:
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from sweeper.study import optuna_study as study_mod

    locked = OperationalError("SELECT 1", {}, sqlite3.OperationalError("database is locked"))
    monkeypatch.setattr(optuna.storages, "RDBStorage", _race_then_real([locked]))
    with pytest.raises(OperationalError, match="database is locked"):
        study_mod.make_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval_s=10)
