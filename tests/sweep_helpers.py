"""Run the real sweep command in a temporary directory and read back what it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf

from sweeper.plan.prepare import flatten
from sweeper.space.constraints import SpaceContext
from sweeper.study.optuna_study import make_storage
from tests.conftest import PROJECT_DIR, compose_dictconfig

REPO = PROJECT_DIR  # the name the tests import from here
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


def unwrapped(lines: list[str], *, keep: Callable[[str], bool] = lambda line: False) -> list[str]:
    """Lines with the console's wrapping undone: a line indented 4 or more past the line before it
    continues that line (sweeper/launch/log_routing.py `wrap_lines`). A line `keep` names is never
    joined, nor joined to."""
    out: list[str] = []
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if (
            out
            and line.strip()
            and not keep(line)
            and not keep(out[-1])
            and indent >= len(out[-1]) - len(out[-1].lstrip(" ")) + 4
        ):
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def said(text: str) -> str:
    """A sweep's output as it was said, whatever the console's width: each wrapped line whole.
    The layout itself is tested in tests/sweeper/test_console.py and
    tests/integration/test_one_parent.py."""
    return "\n".join(unwrapped(text.splitlines())) + ("\n" if text.endswith("\n") else "")


def run_sweep(cwd: Path, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the sweep; its stdout and stderr unwrapped (`said`)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        sweep_argv(*overrides), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    proc.stdout, proc.stderr = said(proc.stdout), said(proc.stderr)
    return proc


def train_best(
    sweep_dir: Path, cwd: Path, *, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Two steps of the trainer on the sweep's exported best.yaml, as a user runs it."""
    argv = [sys.executable, "-m", "train", "--config-path", str(sweep_dir), "--config-name", "best"]
    return subprocess.run(
        [*argv, "train.max_steps=2", "train.eval_every=0"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def finished_sweep(
    cwd: Path, study: str, *overrides: str
) -> tuple[subprocess.CompletedProcess, optuna.Study]:
    """Run a sweep of study `study` that must exit 0; return its process and the study it left."""
    proc = run_sweep(cwd, *overrides, f"hydra.sweeper.study_name={study}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, load_study(cwd, study)


def tiny_cpu_context() -> SpaceContext:
    """The tiny preset on a 2-core CPU, as a sweep's search space sees it."""
    base = flatten(OmegaConf.to_container(compose_dictconfig(["model=tiny"]), resolve=True))
    return SpaceContext(
        tokens_per_step=base["batch.tokens_per_step"],
        block_size=base["model.block_size"],
        cpu_count=2,
        device_type="cpu",
        base=base,
    )


def seeded_study(tmp_path: Path, seed: int) -> optuna.Study:
    """A study in tmp_path/optuna.db with a seeded random sampler: optuna's default draws from an
    unseeded generator, and a test's trials would differ run to run."""
    storage = make_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval_s=10)
    return optuna.create_study(
        direction="maximize",
        storage=storage,
        sampler=optuna.samplers.RandomSampler(seed=seed),
    )


def load_study(cwd: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{cwd / 'sweeps' / 'optuna.db'}")


def sweep_dirs(cwd: Path) -> list[Path]:
    return sorted(p for p in (cwd / "multirun").glob("*/*") if p.is_dir())


def interrupt_sweep(
    cwd: Path,
    argv: list[str],
    *,
    sig: int,
    ready: Callable[[], bool],
    settle_s: float,
    again_after_s: float | None = None,
) -> tuple[int, str]:
    """Start the sweep `argv` in its own session (a signal reaches it as a terminal's Ctrl-C
    would), wait until `ready()`, let it run `settle_s` more, send `sig` (and, with
    `again_after_s`, once more that long after, if it still runs), and return its exit code and
    output (unwrapped: `said`); whatever is left of it is killed."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"the sweep ended before it was ready: {proc.stdout.read()[-3000:]}")
            assert time.monotonic() < deadline, "the sweep never got ready"
            time.sleep(0.2)
        time.sleep(settle_s)
        proc.send_signal(sig)
        if again_after_s is not None:
            time.sleep(again_after_s)
            if proc.poll() is None:
                proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, said(out)
