"""Scale-out on a real PostgreSQL server: two sweep processes share one study and split its budget.

Each worker is the real `python sweep.py -m ...` in its own temporary folder, as a user would start
one per machine; only the storage URL and the study name tie them together.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml
from optuna.trial import TrialState

from sweeper.report.claim_text import claim_line
from sweeper.settings import settings_from
from sweeper.study.budget import Budget
from sweeper.study.export_claim import (
    CLAIM_SUFFIX,
    EXPORT_ATTR,
    claim_export,
    record_export,
    register_worker,
)
from sweeper.study.optuna_study import OWNER_ATTR, StudySpec, count_finished, open_study, storage_of
from tests.conftest import PROJECT_DIR
from tests.postgres import require_postgres, running_postgres
from tests.servers import dead_pid, free_port
from tests.sweep_helpers import said, sweep_argv

N_WORKERS = 2
N_TRIALS = 6
SQLITE_TRIALS = 4  # two each: both workers search, and the pair ends within ~90 s on 2 cores
STUDY = "multiworker"
# Seen ~150 s for both workers on a busy 2-core machine; the limit only stops a hung sweep.
WORKER_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with running_postgres() as url:
        # Create Optuna's tables before the workers start: workers opening a fresh database at the
        # same moment race on CREATE TABLE (PostgreSQL's pg_type unique index), as
        # scripts/start_postgres.sh avoids the same way.
        optuna.storages.RDBStorage(url).engine.dispose()
        yield url


@pytest.mark.parametrize(
    ("owner", "left"),
    [
        (lambda: f"{socket.gethostname()}:{os.getppid()}", 1),  # another live worker: counted
        (lambda: f"{socket.gethostname()}:{dead_pid()}", 2),  # its worker died: an orphan
        (lambda: "elsewhere:123", 1),  # another host, heartbeat not stale: counted
    ],
    ids=["live-worker", "dead-worker", "other-host"],
)
def test_budget_counts_trials_other_workers_are_running(tmp_path: Path, owner, left) -> None:
    spec = StudySpec(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="b", direction="maximize")
    study = open_study(spec)
    study.tell(study.ask(), 1.0)
    study.ask().set_user_attr(OWNER_ATTR, owner())
    budget = Budget(settings_from({"n_trials": 3, "budget.max_wall_s": 0}))
    assert budget.trials_left(study, verify_estimate_s=0.0) == left


def _claim_study(tmp_path: Path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = StudySpec(storage=f"sqlite:///{tmp_path / 'c.db'}", study_name="c", direction="maximize")
    return open_study(spec)


def test_one_export_claim_wins_and_the_others_name_its_file(tmp_path: Path) -> None:
    study = _claim_study(tmp_path)
    register_worker(study, tmp_path / "mine")
    won = claim_export(study, sweep_dir=tmp_path / "mine", compared=[0, 1])
    assert won.ours
    lost = claim_export(study, sweep_dir=tmp_path / "other", compared=[0, 1])
    assert not lost.ours  # the holder lives (this very process): it is verifying
    assert lost.kind == "held" and lost.best_yaml == str(tmp_path / "mine" / "best.yaml")
    assert f"it writes the study's best to {tmp_path / 'mine' / 'best.yaml'}" in claim_line(lost)
    record_export(study, best_yaml=tmp_path / "mine" / "best.yaml", compared=[0, 1])
    won.release(study)
    again = claim_export(study, sweep_dir=tmp_path / "other", compared=[0, 1])
    assert not again.ours and again.kind == "exported"
    assert claim_line(again).endswith(f"exported already: {tmp_path}/mine/best.yaml")
    rerun = claim_export(study, sweep_dir=tmp_path / "other", compared=[0, 1], since=time.time())
    assert rerun.ours  # the same command run again later: it verifies and exports again
    rerun.release(study)
    more = claim_export(study, sweep_dir=tmp_path / "other", compared=[0, 1, 2])  # new trials
    assert more.ours
    more.release(study)
    assert optuna.study.get_all_study_names(storage_of(study)) == ["c"]  # no claim left


def test_an_export_claim_whose_worker_died_is_taken_over(tmp_path: Path) -> None:
    study = _claim_study(tmp_path)
    stale = optuna.create_study(storage=storage_of(study), study_name=f"c{CLAIM_SUFFIX}")
    stale.set_user_attr("owner", f"{socket.gethostname()}:{dead_pid()}")
    claim = claim_export(study, sweep_dir=tmp_path, compared=[0])
    assert claim.ours
    claim.release(study)


_RACE = """
import sys
from pathlib import Path
from sweeper.study.export_claim import claim_export
from sweeper.study.optuna_study import StudySpec, open_study
study = open_study(StudySpec(storage=sys.argv[1], study_name="c", direction="maximize"))
print("ready", flush=True)
sys.stdin.readline()  # every racer opened the study: go
claim = claim_export(study, sweep_dir=Path(sys.argv[2]), compared=[0, 1])
print("won" if claim.ours else "lost", flush=True)
sys.stdin.readline()  # every racer claimed: only now may the winner exit (a holder that is gone
# is a dead worker whose claim the next racer rightly takes over)
"""


def test_workers_claiming_at_the_same_moment_elect_exactly_one(tmp_path: Path) -> None:
    _claim_study(tmp_path)
    url = f"sqlite:///{tmp_path / 'c.db'}"
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    argv = [[sys.executable, "-c", _RACE, url, str(tmp_path / f"w{i}")] for i in range(4)]
    racers = [subprocess.Popen(a, cwd=PROJECT_DIR, **pipes) for a in argv]
    assert [racer.stdout.readline().strip() for racer in racers] == ["ready"] * 4  # all opened
    for racer in racers:
        racer.stdin.write("\n")
        racer.stdin.flush()
    # every racer's verdict is read while all of them are alive; then they may go
    outcomes = sorted(racer.stdout.readline().strip() for racer in racers)
    for racer in racers:
        racer.communicate(input="\n", timeout=60)
    assert outcomes == ["lost", "lost", "lost", "won"]


def _worker_overrides(storage: str, worker: int, n_trials: int = N_TRIALS) -> list[str]:
    return [
        "search=smoke",
        f"hydra.sweeper.storage={storage}",
        f"hydra.sweeper.study_name={STUDY}",
        f"hydra.sweeper.n_trials={n_trials}",
        "hydra.sweeper.mlflow.enabled=false",
        "hydra.sweeper.verify.top_k=1",
        "hydra.sweeper.verify.repeats=1",
        # Workers with the same sampler seed draw the same sequence of points (each process seeds
        # its own sampler), so each worker gets its own seed, as scripts/start_postgres.sh says.
        f"hydra.sweeper.seed={worker}",
        # smoke's two knobs have 4 points; a continuous learning rate (a command-line sweep
        # override joins the space; throughput ignores it) makes every drawn point unique, so a
        # point measured twice shows. Its range leaves out the default (6e-4), so no baseline is
        # queued: the sweep queues it when it finds the study empty, and two workers starting at
        # the same moment both find it empty and both queue it.
        "optim.lr=interval(0.0001,0.0005)",
        # one thread per trial: two workers' trials share a 2-core runner
        "runtime.threads=1",
    ]


def _run_workers(storage: str, root: Path, n_trials: int) -> list[tuple[subprocess.Popen, Path]]:
    """Start N_WORKERS real sweeps on one study at once, each in its own folder (as one per
    machine); wait for both; return each process and its folder (its output in sweep.log)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[tuple[subprocess.Popen, Path]] = []
    try:
        for i in range(N_WORKERS):
            cwd = root / f"worker{i}"
            cwd.mkdir()
            with open(cwd / "sweep.log", "wb") as log_file:
                proc = subprocess.Popen(
                    sweep_argv(*_worker_overrides(storage, i, n_trials)),
                    cwd=cwd,
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            procs.append((proc, cwd))
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        for proc, _ in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    for proc, cwd in procs:
        assert proc.returncode == 0, (cwd / "sweep.log").read_text()[-4000:]
    return procs


def _assert_each_trial_once(study: optuna.Study, n_trials: int, procs: list) -> None:
    """The study's budget, not each worker's: n_trials trials, each point measured once, and
    both workers did part of the work, each trial tagged with the sweep process that ran it."""
    trials = study.get_trials(deepcopy=False)
    # Trials running elsewhere count against the budget (Budget.trials_left); without that the
    # workers ran 7 of 6. The count and the ask are one step under the study's ask lock: without
    # it, workers that read the count at the same moment both asked (CI, loaded, ran 5 of 4).
    assert count_finished(study) == n_trials, [(t.number, t.state.name) for t in trials]
    assert len(trials) == n_trials
    assert all(t.state == TrialState.COMPLETE for t in trials), [t.state.name for t in trials]
    assert sorted(t.number for t in trials) == list(range(n_trials))
    points = [json.dumps(t.params, sort_keys=True) for t in trials]
    assert len(set(points)) == len(points), points  # the workers drew different configurations
    host = socket.gethostname()
    owners = {t.user_attrs[OWNER_ATTR] for t in trials}
    assert owners == {f"{host}:{proc.pid}" for proc, _ in procs}


def _assert_one_export_of_the_study(study: optuna.Study, procs: list) -> Path:
    """One worker verified and exported the study's best, from every worker's trials; the other
    named that file in one line. Returns the best.yaml."""
    (best,) = [b for _, cwd in procs for b in cwd.glob("multirun/*/*/best.yaml")]
    compared = yaml.safe_load(best.read_text())["provenance"]["sweep"]["compared"]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert compared["trials"] == [t.number for t in complete]
    assert compared["workers"] == sorted({t.user_attrs[OWNER_ATTR] for t in complete})
    assert study.user_attrs[EXPORT_ATTR]["best_yaml"] == str(best)
    for _, cwd in procs:
        out = said((cwd / "sweep.log").read_text())  # a long path wraps the line at the console
        if cwd in best.parents:
            assert f"best config: {best}" in out, out[-3000:]
        else:  # one line naming the exporter's file: the study's best is there
            named = [line for line in out.splitlines() if str(best) in line]
            assert len(named) == 1 and "study's best" in named[0], out[-3000:]
            assert "best config:" not in out
    return best


@pytest.mark.slow
def test_two_workers_share_one_postgres_study(pg_url: str, tmp_path: Path) -> None:
    procs = _run_workers(pg_url, tmp_path, N_TRIALS)
    study = optuna.load_study(study_name=STUDY, storage=pg_url)
    _assert_each_trial_once(study, N_TRIALS, procs)
    _assert_one_export_of_the_study(study, procs)


def test_two_workers_on_one_sqlite_study_export_the_studys_best(tmp_path: Path) -> None:
    """The issue's figure: two sweeps on one study, started together: both exit 0, each trial
    recorded once, and one best.yaml, of the study's trials; the other worker names it."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    procs = _run_workers(storage, tmp_path, SQLITE_TRIALS)
    study = optuna.load_study(study_name=STUDY, storage=storage)
    _assert_each_trial_once(study, SQLITE_TRIALS, procs)
    best = _assert_one_export_of_the_study(study, procs)
    winner = yaml.safe_load(best.read_text())["provenance"]["sweep"]["trial"]
    print(f"two workers: {len(study.trials)} trials, one best.yaml ({best}), winner trial {winner}")
    # no claim left behind in the storage: only the study itself
    assert optuna.study.get_all_study_names(storage=storage) == [STUDY]


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(PROJECT_DIR / "scripts" / "start_postgres.sh"), *args],
        env={**os.environ, "PYTHON": sys.executable},  # creates Optuna's tables
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_start_postgres_script_is_idempotent_and_prints_the_storage() -> None:
    require_postgres()
    # Straight under the temp root: under root the server runs as `postgres`, which must reach it.
    root = Path(tempfile.mkdtemp(prefix="pg-script-"))
    port = free_port()
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{port}/optuna"
    try:
        first = _script(str(root), str(port))
        assert first.returncode == 0, first.stderr
        assert first.stdout == f"hydra.sweeper.storage={url}\n"
        # Run again (asking for another port): the running cluster is found and named as before.
        again = _script(str(root), str(free_port()))
        assert again.returncode == 0, again.stderr
        assert again.stdout == first.stdout
        assert "already running" in again.stderr
        # Optuna's tables exist before any worker starts (no CREATE TABLE race between workers).
        storage = optuna.storages.RDBStorage(url, skip_table_creation=True)
        assert storage.get_all_studies() == []
        storage.engine.dispose()
    finally:
        stopped = _script("stop", str(root))
        shutil.rmtree(root, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stderr
    with pytest.raises(sqlalchemy.exc.OperationalError, match="refused"):
        sqlalchemy.create_engine(url).connect()
