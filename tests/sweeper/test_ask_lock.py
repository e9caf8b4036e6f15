"""The study's ask lock: one holder at a time across processes, released on the way out, taken over
from a dead holder. Real Optuna on SQLite, real processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from sweeper.study.ask_lock import LOCK_SUFFIX, TAKEOVER_S, ask_lock
from sweeper.study.optuna_study import StudySpec, open_study, storage_of
from tests.conftest import PROJECT_DIR
from tests.servers import dead_pid


def _study(url: str) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return open_study(StudySpec(storage=url, study_name="s", direction="maximize"))


# Each racer adds 1 to a study attribute ROUNDS times, reading and writing it under the lock with
# a pause between: without the lock, racers that read the same value lose each other's additions.
_RACER = """
import sys, time
import optuna
from sweeper.study.ask_lock import ask_lock
from sweeper.study.optuna_study import StudySpec, open_study
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = open_study(StudySpec(storage=sys.argv[1], study_name="s", direction="maximize"))
print("ready", flush=True)
sys.stdin.readline()
for _ in range(int(sys.argv[2])):
    with ask_lock(study):
        n = study.user_attrs.get("n", 0)
        time.sleep(0.02)
        study.set_user_attr("n", n + 1)
"""
RACERS, ROUNDS = 3, 5


def test_racers_under_the_lock_lose_no_update(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    study = _study(url)
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    argv = [sys.executable, "-c", _RACER, url, str(ROUNDS)]
    racers = [subprocess.Popen(argv, cwd=PROJECT_DIR, **pipes) for _ in range(RACERS)]
    assert [r.stdout.readline().strip() for r in racers] == ["ready"] * RACERS
    for racer in racers:  # go together
        racer.stdin.write("\n")
        racer.stdin.flush()
    for racer in racers:
        racer.communicate(timeout=120)
        assert racer.returncode == 0
    assert study.user_attrs["n"] == RACERS * ROUNDS
    assert optuna.study.get_all_study_names(storage_of(study)) == ["s"]  # no lock left


def test_the_lock_is_released_when_the_block_raises(tmp_path: Path) -> None:
    study = _study(f"sqlite:///{tmp_path / 'o.db'}")
    with pytest.raises(RuntimeError), ask_lock(study):
        assert f"s{LOCK_SUFFIX}" in optuna.study.get_all_study_names(storage_of(study))
        raise RuntimeError("the ask failed")
    assert optuna.study.get_all_study_names(storage_of(study)) == ["s"]


def test_a_lock_whose_holder_died_is_taken_over_at_once(tmp_path: Path) -> None:
    study = _study(f"sqlite:///{tmp_path / 'o.db'}")
    stale = optuna.create_study(storage=storage_of(study), study_name=f"s{LOCK_SUFFIX}")
    stale.set_user_attr("owner", f"{socket.gethostname()}:{dead_pid()}")
    start = time.monotonic()
    with ask_lock(study):
        pass
    assert time.monotonic() - start < TAKEOVER_S / 4
    assert optuna.study.get_all_study_names(storage_of(study)) == ["s"]
