"""A resumed sweep keeps one study in one folder: job numbers continue after the folders already
there, and the study remembers its first sweep dir."""

from __future__ import annotations

import logging
from pathlib import Path

import optuna
import pytest

from sweeper.launch.batch import JobLauncher, first_free_job
from sweeper.start import SWEEP_DIR_ATTR, note_sweep_dir


@pytest.mark.parametrize(
    "folders,expected",
    [([], 0), (["0"], 1), (["0", "1", "5", "plots", ".hydra"], 6), (["plots"], 0), (["3"], 4)],
)
def test_first_free_job(tmp_path: Path, folders: list[str], expected: int) -> None:
    for name in folders:
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a job folder")
    assert first_free_job(tmp_path) == expected
    assert JobLauncher(object(), sweep_dir=tmp_path).job_idx == expected
    assert JobLauncher(object()).job_idx == 0


def test_the_study_remembers_its_first_sweep_dir(tmp_path: Path, caplog) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="s")
    note_sweep_dir(study, tmp_path / "a")
    note_sweep_dir(study, tmp_path / "a")  # the same folder again: nothing to say
    assert study.user_attrs[SWEEP_DIR_ATTR] == str(tmp_path / "a")
    assert "earlier outputs" not in caplog.text
    with caplog.at_level(logging.WARNING):
        note_sweep_dir(study, tmp_path / "b")
    assert study.user_attrs[SWEEP_DIR_ATTR] == str(tmp_path / "a")
    assert f"hydra.sweep.dir={tmp_path / 'a'}" in caplog.text
