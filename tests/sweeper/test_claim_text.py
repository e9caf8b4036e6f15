"""A shared study's export as data and in words: the claim's kinds and the deferral, on a real
SQLite study, and sweeper/report/claim_text.py's sentences for each."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sweeper.report.claim_text import claim_line, deferral_line
from sweeper.study import export_claim
from sweeper.study.export_claim import (
    CLAIM_SUFFIX,
    Claim,
    Deferral,
    claim_export,
    deferral,
    record_export,
    register_worker,
)
from sweeper.study.optuna_study import OWNER_ATTR, storage_of
from sweeper.study.owner import owner_tag


@pytest.fixture
def study(tmp_path: Path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=f"sqlite:///{tmp_path / 'c.db'}", study_name="c")


def test_a_deferral_names_each_running_worker_and_its_file(study: optuna.Study) -> None:
    for owner in ("h:2", "h:1", "h:1"):
        trial = study.ask()
        study._storage.set_trial_user_attr(trial._trial_id, OWNER_ATTR, owner)
    study.set_user_attr("worker:h:1", "/sweeps/one")
    running = study.get_trials(deepcopy=False)
    got = deferral(study, running)
    assert got == Deferral(
        study="c",
        trials=[0, 1, 2],
        owners=["h:1", "h:2"],
        best_yamls=["/sweeps/one/best.yaml", None],
    )
    assert deferral_line(got) == (
        "study 'c' is shared: trial(s) 0, 1, 2 still run in worker(s) h:1, h:2; the last worker to "
        "finish verifies the study's completed trials and writes the study's best to "
        "/sweeps/one/best.yaml or the sweep dir of worker h:2"
    )


def test_a_claim_not_won_says_who_holds_it_and_where(study: optuna.Study, tmp_path: Path) -> None:
    register_worker(study, tmp_path / "mine")
    won = claim_export(study, sweep_dir=tmp_path / "mine", compared=[0, 1])
    assert won.ours and won.kind == "ours"
    with pytest.raises(ValueError, match="claim kind 'ours'"):
        claim_line(won)
    held = claim_export(study, sweep_dir=tmp_path / "other", compared=[0, 1])
    mine = str(tmp_path / "mine" / "best.yaml")
    assert (held.ours, held.kind, held.holder, held.best_yaml) == (False, "held", owner_tag(), mine)
    assert claim_line(held) == (
        f"worker {owner_tag()} is verifying study 'c''s completed trials; it writes the study's "
        f"best to {mine}"
    )
    record_export(study, best_yaml=Path(mine), compared=[0, 1])
    won.release(study)
    done = claim_export(study, sweep_dir=tmp_path / "other", compared=[0, 1])
    assert (done.kind, done.best_yaml, done.compared) == ("exported", mine, 2)
    assert (
        claim_line(done)
        == f"the best of study 'c' (2 completed trials) is exported already: {mine}"
    )


def test_a_claim_whose_holder_never_said_names_another_worker(
    study: optuna.Study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export_claim, "HOLDER_WAIT_S", 0.0)
    optuna.create_study(storage=storage_of(study), study_name=f"c{CLAIM_SUFFIX}")
    held = claim_export(study, sweep_dir=tmp_path, compared=[0])
    assert (held.kind, held.holder, held.best_yaml) == ("held", None, None)
    assert claim_line(held) == (
        "another worker is verifying study 'c''s completed trials; it writes the study's best "
        "to its own sweep dir"
    )


def test_a_lost_takeover_race_is_said_in_one_line() -> None:
    raced = Claim(ours=False, kind="raced", study="c")
    assert claim_line(raced) == "another worker took over the export claim at the same moment"
