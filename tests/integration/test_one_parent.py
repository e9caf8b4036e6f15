"""One MLflow parent run per sweep, across interruptions and resumes; one experiment per study and
storage; plots small enough for an artifact store; a console without Hydra's per-job chatter
(kept in the sweep's log file) and no line over 160 characters. Real MLflow on SQLite, real Optuna
studies, and one real sweep stopped by SIGTERM and resumed."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from sweeper.launch.batch import job_name
from sweeper.study.optuna_study import REQUEUED_ATTR
from sweeper.tracking.mlflow_run import SweepTracker
from sweeper.tracking.names import experiment_name, storage_fingerprint
from sweeper.tracking.parent import PARENT_ATTR
from sweeper.tracking.protocol import TrialLog
from tests.integration.test_interrupts import OVERRIDES, _a_trial_runs
from tests.sweep_helpers import interrupt_sweep, load_study, sweep_argv


def _a_trial_logs(cwd: Path) -> bool:
    """A trial runs and its job folder holds its log: the signal then lands on a trial whose log
    the killed run must carry (a RUNNING trial alone may not have reached its folder under load)."""
    if not _a_trial_runs(cwd):
        return False
    running = [t.number for t in load_study(cwd, "stop").trials if t.state.name == "RUNNING"]
    return any(any(cwd.glob(f"multirun/*/*/{job_name(n)}/trial.log")) for n in running)


def _study(tmp_path: Path, name: str = "s", db: str = "optuna.db") -> tuple[optuna.Study, str]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{tmp_path / db}"
    return optuna.create_study(study_name=name, storage=storage, load_if_exists=True), storage


def _start(uri: str, study: optuna.Study, storage: str) -> SweepTracker:
    t = SweepTracker(
        tracking_uri=uri,
        experiment=experiment_name(study.study_name, storage),
        artifact_location=None,
    )
    t.start_sweep(
        run_name="sweep",
        params={"n_trials": 4},
        tags={"study": study.study_name, "storage": storage},
        study=study,
    )
    assert not t.disabled
    return t


def _trial(t: SweepTracker, number: int, state: str = "complete") -> str:
    reason = None if state == "complete" else "x"
    record = TrialLog(number=number, state=state, reason=reason, params={"batch.micro_batch": 8})
    return t.log_trial(record)


def test_a_stopped_sweep_is_continued_by_the_resume_and_a_finished_one_is_not(tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study, storage = _study(tmp_path)
    client = MlflowClient(tracking_uri=uri)
    first = _start(uri, study, storage)
    _trial(first, 0)
    _trial(first, 1, "interrupted")
    first.finish("KILLED")  # Ctrl-C / SIGTERM: engine._interrupted
    assert study.user_attrs[PARENT_ATTR]["run_id"] == first.parent_run_id

    resumed = _start(uri, study, storage)
    assert resumed.parent_run_id == first.parent_run_id
    assert client.get_run(first.parent_run_id).info.status == "RUNNING"
    _trial(resumed, 2)
    resumed.finish()
    parent = client.get_run(first.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["resumed"] == "1"
    children = client.search_runs(
        [first.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{first.parent_run_id}'",
    )
    assert sorted(r.data.tags["trial_number"] for r in children) == ["0", "1", "2"]
    killed = [r for r in children if r.data.tags["trial_number"] == "1"]
    assert killed[0].info.status == "KILLED" and killed[0].data.tags["failure_reason"] == "x"

    # a finished sweep is a sweep of its own: the next one starts a new parent run
    again = _start(uri, study, storage)
    assert again.parent_run_id != first.parent_run_id
    again.finish("FAILED")  # a crash: reopened too
    assert _start(uri, study, storage).parent_run_id == again.parent_run_id


def test_two_studies_of_one_name_in_two_storages_get_two_experiments(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    laptop, laptop_url = _study(tmp_path, "gpt2", "a.db")
    team, team_url = _study(tmp_path, "gpt2", "b.db")
    a, b = _start(uri, laptop, laptop_url), _start(uri, team, team_url)
    assert a.experiment_id != b.experiment_id
    assert a.experiment != b.experiment and a.experiment.startswith("gpt2 (storage ")
    exp = MlflowClient(tracking_uri=uri).get_experiment(a.experiment_id)
    assert exp.tags["storage_fingerprint"] == storage_fingerprint(laptop_url)
    a.finish("KILLED")
    # the same study again (its file reached by a relative path from its folder): the same one
    monkeypatch.chdir(tmp_path)
    assert storage_fingerprint("sqlite:///a.db") == storage_fingerprint(laptop_url)
    assert _start(uri, laptop, laptop_url).experiment_id == a.experiment_id


@pytest.mark.parametrize(
    ("url", "same_as"),
    [
        ("postgresql://bob:hunter2@db/optuna", "postgresql://bob:other@db/optuna"),  # masked
    ],
)
def test_a_password_is_not_part_of_the_fingerprint(url: str, same_as: str) -> None:
    assert storage_fingerprint(url) == storage_fingerprint(same_as)
    assert storage_fingerprint(url) != storage_fingerprint("postgresql://bob@db2/optuna")


# -- one real sweep: stopped by SIGTERM, resumed ------------------------------------------------
MAX_ARTIFACT_BYTES = 2_000_000  # per sweep; the Plotly HTML views alone were about 19 MB


def _run_ids(client: MlflowClient, experiment_id: str) -> list:
    return client.search_runs([experiment_id], max_results=1000)


def test_a_sweep_stopped_and_resumed_is_one_parent_run_with_every_trial(tmp_path) -> None:
    code, out = interrupt_sweep(
        tmp_path,
        sweep_argv(*OVERRIDES),
        sig=signal.SIGTERM,
        ready=lambda: _a_trial_logs(tmp_path),
        # at once: a tiny trial can end within a second or two of its log appearing (CI, under
        # load, saw the signal land on the next trial, asked but with no job folder yet)
        settle_s=0,
    )
    assert code == 130, out[-3000:]
    hint = next(line for line in out.splitlines() if "resume with:" in line)
    argv = shlex.split(hint.split("resume with: ", 1)[1])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [*sweep_argv()[:2], *argv[2:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    assert experiment.name.startswith("stop (storage ")
    runs = _run_ids(client, experiment.experiment_id)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FINISHED" and parent.data.tags["resumed"] == "1"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == len(runs) - 1  # every run is the parent's

    study = load_study(tmp_path, "stop")
    (stopped,) = [t for t in study.trials if t.user_attrs.get("failure_kind") == "interrupted"]
    (again,) = [t for t in study.trials if t.user_attrs.get(REQUEUED_ATTR) == stopped.number]
    ran = {t.number for t in study.trials if "job_dir" in t.user_attrs} | {stopped.number}
    searched = {
        int(r.data.tags["trial_number"]) for r in children if r.data.tags["kind"] == "search"
    }
    assert ran <= searched and again.number in searched
    (killed,) = [r for r in children if r.data.tags["trial_number"] == str(stopped.number)]
    assert killed.info.status == "KILLED"
    assert killed.data.tags["failure_reason"].startswith("interrupted")
    assert "trial.log" in [a.path for a in client.list_artifacts(killed.info.run_id)]

    sweep_dir = next((tmp_path / "multirun").glob("*/*"))
    stored = sum(p.stat().st_size for p in (tmp_path / "mlartifacts").rglob("*") if p.is_file())
    assert stored < MAX_ARTIFACT_BYTES, stored
    assert not list((tmp_path / "mlartifacts").rglob("*.html"))

    # the resumed sweep's console speaks in trial numbers; Hydra's per-job lines and Optuna's
    # experimental warning are in the sweep's log file only
    assert f"trial {again.number:>3} " in console
    assert "Launching 1 jobs" not in console and "ExperimentalWarning" not in console
    # every console line is at most 160 characters (MAX_CONSOLE_WIDTH in
    # sweeper/launch/log_routing.py), the trial lines included: each names only the knobs that
    # differ from the start
    longest = max(console.splitlines(), key=len)
    assert len(longest) <= 160, longest
    log_text = (sweep_dir / "sweep.log").read_text()
    assert "Launching 1 jobs" in log_text and "ExperimentalWarning" in log_text
    # ... and the log file keeps each trial's line whole, with every knob by its full name
    (kept,) = [ln for ln in log_text.splitlines() if f" - trial {again.number:>3} " in ln]
    assert all(f"{key}={value}" in kept for key, value in again.params.items()), kept
    assert (sweep_dir / f"trial-{again.number}").resolve() == Path(again.user_attrs["job_dir"])
