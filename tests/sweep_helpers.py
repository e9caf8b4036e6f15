"""Run the real sweep command in a temporary directory and read back what it left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna

REPO = Path(__file__).resolve().parents[1]
# A trial of the tiny preset measured for a few steps: seconds, not minutes.
FAST_TRIAL = [
    "trial.warmup_steps=1",
    "trial.max_steps=4",
    "trial.min_steps=2",
    "trial.max_seconds=5",
    "trial.report_every=2",
    "batch.tokens_per_step=2048",
]


def sweep_argv(*overrides: str) -> list[str]:
    return [sys.executable, str(REPO / "sweep.py"), "-m", *FAST_TRIAL, *overrides]


def run_sweep(cwd: Path, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        sweep_argv(*overrides), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def finished_sweep(
    cwd: Path, study: str, *overrides: str
) -> tuple[subprocess.CompletedProcess, optuna.Study]:
    """Run a sweep of study `study` that must exit 0; return its process and the study it left."""
    proc = run_sweep(cwd, *overrides, f"hydra.sweeper.study_name={study}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, load_study(cwd, study)


def load_study(cwd: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{cwd / 'sweeps' / 'optuna.db'}")


def sweep_dirs(cwd: Path) -> list[Path]:
    return sorted(p for p in (cwd / "multirun").glob("*/*") if p.is_dir())
