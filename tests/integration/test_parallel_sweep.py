"""Parallel trials: the search's slots (no batch barrier), Hydra's joblib and submitit launchers
for real on this CPU, and the Slurm example config as Hydra composes it."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.plan.preflight import check_launcher
from sweeper.search.loop import Search
from sweeper.settings import settings_from
from sweeper.space.search_space import parse_space
from sweeper.study.optuna_study import DUPLICATE_ATTR, REQUEUED_ATTR
from tests.conftest import CONF_DIR
from tests.race_helpers import race_context
from tests.sweep_helpers import (
    finished_sweep,
    interrupt_sweep,
    load_study,
    run_sweep,
    seeded_study,
    sweep_argv,
    sweep_dirs,
    tiny_cpu_context,
)

# ---- the launcher rules (pure) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("launcher", "n_jobs", "plan_device", "error"),
    [
        ("BasicLauncher", 1, "", None),
        ("BasicLauncher", 2, "", r"n_jobs=2 needs a parallel launcher: .*hydra/launcher=joblib"),
        ("JoblibLauncher", 4, "", None),
        ("LocalLauncher", 2, "", None),  # submitit's local executor: this machine
        (
            "SlurmLauncher",
            8,
            "",
            r"hydra/launcher=SlurmLauncher runs trials on other machines.*"
            r"set hydra\.sweeper\.plan\.device",
        ),
        ("SlurmLauncher", 8, "NVIDIA H100 80GB HBM3", None),
    ],
)
def test_launcher_rules(launcher: str, n_jobs: int, plan_device: str, error: str | None) -> None:
    if error is None:
        check_launcher(launcher, n_jobs=n_jobs, plan_device=plan_device)
    else:
        with pytest.raises(ValueError, match=error):
            check_launcher(launcher, n_jobs=n_jobs, plan_device=plan_device)


# ---- the search keeps every slot busy -----------------------------------------------------------


class TimedSlots:
    """A parallel launcher stand-in: the first job on slot 0 takes `first_s`, every other
    `rest_s`; it records each job's slot, start and end, and fails if two jobs ever share a
    slot."""

    parallel = True

    def __init__(self, *, first_s: float, rest_s: float) -> None:
        self.first_s, self.rest_s = first_s, rest_s
        self.jobs: list[dict] = []
        self.busy: set[int] = set()
        self.lock = threading.Lock()

    def launch_one(self, job: list[str], *, slot: int, name: str | None = None) -> dict:
        with self.lock:
            assert slot not in self.busy, f"slot {slot} given to two jobs at once"
            self.busy.add(slot)
            first = slot == 0 and all(r["slot"] != 0 for r in self.jobs)
            record = {"job": job, "slot": slot, "start": time.monotonic()}
            self.jobs.append(record)
        time.sleep(self.first_s if first else self.rest_s)
        with self.lock:
            record["end"] = time.monotonic()
            self.busy.discard(slot)
        result = {"schema_version": 2, "status": "complete", "tokens_per_s": 100.0 + len(job)}
        return {"state": "complete", "result": result, "wall_s": record["end"] - record["start"]}

    def abort(self) -> None:
        pass


def test_a_freed_slot_is_filled_at_once_while_a_long_trial_runs(tmp_path: Path) -> None:
    """One slow trial on slot 0; every other trial runs on slot 1 meanwhile. A batch barrier
    would have held trial 2 back until the slow trial 0 ended."""
    settings = settings_from(
        {"sampler": "random", "n_trials": 6, "n_jobs": 2, "mlflow.enabled": False, "seed": 5}
    )
    lrs = ", ".join(f"{k}e-4" for k in range(1, 13))
    space = parse_space({"optim.lr": f"choice({lrs})"}, tiny_cpu_context())
    study = seeded_study(tmp_path, settings.seed)
    slots = TimedSlots(first_s=4.0, rest_s=0.2)
    sweep = race_context(jobs=slots, settings=settings, study=study, space=space)
    Search(sweep, storage="unused").run()

    assert len(slots.jobs) == 6
    first = min((r for r in slots.jobs if r["slot"] == 0), key=lambda r: r["start"])
    meanwhile = [r for r in slots.jobs if r["slot"] == 1 and r["start"] < first["end"]]
    # a batch barrier starts one trial on slot 1 while the slow one runs (trial 1); a slot filled
    # at once as it frees starts the rest there (all 5 on an idle machine; counted by starts, not
    # ends, so a loaded machine's slower asks do not read as a barrier)
    assert len(meanwhile) >= 3, f"the other slot waited for the slow one: {slots.jobs}"
    ran = [t for t in study.trials if DUPLICATE_ATTR not in t.user_attrs]
    assert [t.state for t in ran] == [TrialState.COMPLETE] * 6  # each told once
    assert len({t.params["optim.lr"] for t in ran}) == 6  # never one point run twice


# ---- real launchers on this CPU -----------------------------------------------------------------

SMOKE = ("search=smoke", "hydra.sweeper.verify.top_k=1", "hydra.sweeper.verify.repeats=1")


def _trials_recorded_once(study: optuna.Study, sweep_dir: Path, n_trials: int) -> list:
    """Every measured trial finished once, in a job folder of its own, with its own result."""
    ran = [t for t in study.trials if DUPLICATE_ATTR not in t.user_attrs]
    why = [
        (
            t.number,
            t.state.name,
            t.user_attrs.get("failure_kind"),
            t.user_attrs.get("failure_reason"),
        )
        for t in ran
    ]
    assert [t.state for t in ran] == [TrialState.COMPLETE] * n_trials, why
    job_dirs = [t.user_attrs["job_dir"] for t in ran]
    assert len(set(job_dirs)) == n_trials
    for job_dir in job_dirs:
        assert Path(job_dir).parent == sweep_dir and (Path(job_dir) / "result.json").is_file()
    return ran


def _two_at_a_time(
    tmp_path: Path, study: str, n_trials: int, *launcher: str
) -> tuple[subprocess.CompletedProcess, Path, list]:
    """A smoke sweep of `n_trials` trials, two at a time on `launcher`: it ends with every trial
    recorded once and a best.yaml. Returns its process, its folder and its trials."""
    proc, found = finished_sweep(
        tmp_path,
        study,
        *SMOKE,
        *launcher,
        "hydra.sweeper.n_jobs=2",
        f"hydra.sweeper.n_trials={n_trials}",
    )
    (sweep_dir,) = sweep_dirs(tmp_path)
    ran = _trials_recorded_once(found, sweep_dir, n_trials)
    assert (sweep_dir / "best.yaml").is_file()
    return proc, sweep_dir, ran


@pytest.mark.slow
def test_a_joblib_sweep_runs_two_trials_at_once_and_records_each_once(tmp_path: Path) -> None:
    proc, sweep_dir, ran = _two_at_a_time(tmp_path, "joblib", 4, "hydra/launcher=joblib")
    # two at once: some trial started before the one before it had finished
    spans = sorted((t.datetime_start, t.datetime_complete) for t in ran)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), spans
    # Hydra's launcher chatter goes to the sweep's log file, not the console
    assert "Joblib.Parallel" in (sweep_dir / "sweep.log").read_text()
    assert "Joblib.Parallel" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_submitits_local_executor_runs_a_two_trial_sweep(tmp_path: Path) -> None:
    submitit = ("hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10")
    _, sweep_dir, _ = _two_at_a_time(tmp_path, "submitit", 2, *submitit)
    assert list((sweep_dir / ".submitit").iterdir())  # the jobs went through submitit


# the examples' Slurm launcher (conf/hydra/launcher/slurm.yaml) on partition gpu, 4 sweep slots
SLURM_FOUR_SLOTS = (
    "hydra/launcher=slurm",
    "hydra.launcher.partition=gpu",
    "hydra.sweeper.n_jobs=4",
)


def test_a_slurm_sweep_without_a_named_device_stops_before_any_trial(tmp_path: Path) -> None:
    proc = run_sweep(tmp_path, *SMOKE, *SLURM_FOUR_SLOTS)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said[-3000:]
    assert "hydra/launcher=SlurmLauncher runs trials on other machines" in said
    assert "set hydra.sweeper.plan.device to the GPU they get" in said
    assert "Traceback" not in said
    assert not (tmp_path / "sweeps").exists()  # no study was opened


def test_the_slurm_example_config_composes_for_a_two_gpu_trial() -> None:
    from hydra import compose, initialize_config_dir

    import train.core.config  # noqa: F401  (registers `train_schema`)

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "sweep",
            overrides=[*SLURM_FOUR_SLOTS, "runtime.nproc=2"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.partition, launcher.gpus_per_node, launcher.tasks_per_node) == ("gpu", 2, 1)
    assert launcher.array_parallelism == 4  # as many Slurm jobs at once as sweep slots
    assert launcher.submitit_folder.endswith(".submitit/%j")
    assert (launcher.cpus_per_task, launcher.timeout_min) == (16, 60)


def _processes_under(folder: Path) -> list[int]:
    """Pids of live processes whose command line names `folder` (a sweep's own trials)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split()[2]
        except (OSError, IndexError):
            continue
        if str(folder) in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_ctrl_c_stops_every_running_slot_and_records_each_trial(tmp_path: Path) -> None:
    """Ctrl-C while two joblib slots run: both trials are recorded as interrupted and queued
    again, the sweep exits 130 with its resume line, and no trial process is left running."""
    long_trials = ("trial.max_steps=400", "trial.min_steps=400", "trial.max_seconds=60")
    argv = sweep_argv(
        *SMOKE,
        "hydra/launcher=joblib",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.study_name=stop2",
        *long_trials,
    )
    # two job folders with their trial's config: both slots are running (the study is read
    # only afterwards: opening it while the sweep creates its tables races with it)
    code, out = interrupt_sweep(
        tmp_path,
        argv,
        sig=signal.SIGINT,
        settle_s=3,
        ready=lambda: len(list(tmp_path.glob("multirun/*/*/*/trial_config.yaml"))) >= 2,
    )
    assert code == 130, out[-3000:]
    assert sum("resume with:" in line for line in out.splitlines()) == 1, out[-3000:]
    study = load_study(tmp_path, "stop2")
    stopped = [t for t in study.trials if t.user_attrs.get("failure_kind") == "interrupted"]
    assert len(stopped) == 2  # both slots' trials
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    queued = [t for t in study.trials if t.user_attrs.get(REQUEUED_ATTR) is not None]
    assert sorted(t.user_attrs[REQUEUED_ATTR] for t in queued) == sorted(t.number for t in stopped)
    deadline = time.monotonic() + 15
    while _processes_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)  # joblib's workers are killed; their trials die with them
    assert _processes_under(tmp_path) == []
