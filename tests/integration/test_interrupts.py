"""Ctrl-C and SIGTERM during a real sweep: the running trial is recorded as interrupted and its
point queued again, the MLflow sweep run is closed KILLED, and one line says how to resume; no
traceback."""

from __future__ import annotations

import shlex
import signal
import subprocess

import mlflow
import pytest
import sqlalchemy
from optuna.trial import TrialState

from sweeper.study.optuna_study import REQUEUED_ATTR
from tests.sweep_helpers import interrupt_sweep, load_study, sweep_argv

OVERRIDES = [
    "search=smoke",
    "hydra.sweeper.study_name=stop",
    "hydra.sweeper.n_trials=4",
    "trial.max_steps=40",
    "trial.max_seconds=8",
]


def test_a_sweep_the_suite_starts_takes_ctrl_c_however_the_suite_was_started() -> None:
    """A suite started with SIGINT ignored (a background command of a shell without job
    control) would start every sweep with it ignored: the tests below would send Ctrl-C to a
    sweep that cannot hear it. tests/conftest.py handles SIGINT so that children get the default."""
    import sys

    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    said = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "True"


def _a_trial_runs(cwd) -> bool:
    if not (cwd / "sweeps" / "optuna.db").exists():
        return False
    try:
        states = [t.state for t in load_study(cwd, "stop").trials]
    except KeyError:  # the study is not created yet
        return False
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError):
        return False  # the sweep is creating the tables right now
    return bool(states) and states[-1] == TrialState.RUNNING


@pytest.mark.parametrize(
    "sig,again",
    [(signal.SIGINT, None), (signal.SIGTERM, None), (signal.SIGINT, 0.3)],
    ids=["ctrl-c", "sigterm", "ctrl-c-twice"],
)
def test_a_stopped_sweep_records_the_trial_closes_its_run_and_says_how_to_resume(
    tmp_path, sig, again
) -> None:
    code, out = interrupt_sweep(
        tmp_path,
        sweep_argv(*OVERRIDES),
        sig=sig,
        again_after_s=again,
        ready=lambda: _a_trial_runs(tmp_path),
        settle_s=2,
    )
    assert code == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    hints = [line for line in out.splitlines() if "resume with:" in line]
    assert len(hints) == 1, out[-3000:]
    sweep_dir = next((tmp_path / "multirun").glob("*/*"))
    assert f"hydra.sweep.dir={sweep_dir.resolve()}" in hints[0]
    assert "hydra.sweeper.study_name=stop" in hints[0]

    study = load_study(tmp_path, "stop")
    stopped = [t for t in study.trials if t.user_attrs.get("failure_kind") == "interrupted"]
    assert len(stopped) == 1 and stopped[0].state == TrialState.FAIL
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    # its point is asked again when the sweep resumes: nothing the user started is lost
    queued = [t for t in study.trials if t.user_attrs.get(REQUEUED_ATTR) == stopped[0].number]
    assert len(queued) == 1 and queued[0].state == TrialState.WAITING
    assert queued[0].system_attrs.get("fixed_params") == stopped[0].params

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.status for r in parents] == ["KILLED"]
    # the sweep's settings as params, under the names the user sets them by
    settings = parents[0].data.params
    assert {"pruner.kind", "verify.top_k", "verify.repeats", "n_trials"} <= set(settings)
    assert not {"pruner", "verify_top_k", "verify_repeats"} & set(settings)
    assert not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
    if sig == signal.SIGTERM:
        _resume_keeps_one_folder(tmp_path, hints[0], sweep_dir, stopped[0].number)


def _resume_keeps_one_folder(tmp_path, hint: str, sweep_dir, stopped: int) -> None:
    """The hint's command finishes the study in the original folder; no earlier job is lost."""
    before = {
        p.name: (p / "trial.log").read_bytes()
        for p in sweep_dir.iterdir()
        if p.is_dir() and p.name.isdigit() and (p / "trial.log").exists()
    }
    argv = shlex.split(hint.split("resume with: ", 1)[1])
    proc = subprocess.run(
        [*sweep_argv()[:2], *argv[2:]], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted((tmp_path / "multirun").glob("*/*")) == [sweep_dir]
    for name, log in before.items():  # every earlier job's folder is as it was
        assert (sweep_dir / name / "trial.log").read_bytes() == log
    study = load_study(tmp_path, "stop")
    (again,) = [t for t in study.trials if t.user_attrs.get(REQUEUED_ATTR) == stopped]
    assert again.state != TrialState.WAITING
    job_dirs = [t.user_attrs.get("job_dir") for t in study.trials if t.user_attrs.get("job_dir")]
    assert len(job_dirs) == len(set(job_dirs))  # one folder per trial, none reused
