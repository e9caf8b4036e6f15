"""Shared fixtures for the trainer's integration tests (test_trial.py, test_train_run.py).

One small synthetic token set is made per session; configs are composed in-process from conf/
exactly as `python -m train.trial` composes them, so most tests call the trainer as a function
(fast) and a few run the real CLI in a subprocess (exit codes, files).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from train.core import hooks

# the tests plant faults and latencies (train/core/hooks.py): on before the schema is registered,
# and inherited by every trial process a test starts
hooks.enable()

# The suite's processes take Ctrl-C as a terminal's foreground process does, however the suite was
# started. A shell without job control starts a background command (`cmd &`, as a CI runner or a
# script may start the suite) with SIGINT ignored; exec keeps an ignored signal ignored, so every
# sweep and trainer a test starts would ignore the SIGINT the interrupt tests send (each ended as
# if never stopped, exit 0). A handled signal is reset to its default across exec, so handling it
# here gives every child the default, which Python turns into KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PROJECT_DIR = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_DIR / "conf"

# Settings that keep a CPU trial to a few seconds: the tiny preset, 512 tokens per step
# (4 x 2 x 64), batches built in the main process, one warm-up step, a short window.
FAST = (
    "model=tiny",
    "batch.tokens_per_step=512",
    "batch.micro_batch=4",
    "batch.grad_accum=2",
    "data.num_workers=0",
    "runtime.compile=none",
    "trial.warmup_steps=1",
    "trial.max_steps=4",
    "trial.min_steps=2",
)


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 200k-token embedded data set (nanoGPT uint16 files + meta.json), made once per session."""
    from train.data.synthetic import generate

    out = tmp_path_factory.mktemp("data") / "synthetic"
    generate(out, num_tokens=200_000)
    return out


def compose_dictconfig(overrides: Sequence[str] = ()):
    """conf/train.yaml + overrides, composed by Hydra (a DictConfig, not yet validated)."""
    from hydra import compose, initialize_config_dir

    import train.core.config  # noqa: F401  (registers `train_schema` in Hydra's ConfigStore)

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def compose_config(overrides: Sequence[str] = ()):
    """conf/train.yaml + overrides -> a validated train.core.config.Config, as the CLI builds it."""
    from omegaconf import OmegaConf

    import train.core.config

    cfg = OmegaConf.to_object(compose_dictconfig(overrides))
    assert isinstance(cfg, train.core.config.Config)
    return cfg


def fast_overrides(data_dir: Path, checkpoint_dir: Path) -> list[str]:
    """FAST plus the shared data and a private checkpoint folder (never the cwd's defaults)."""
    return [*FAST, f"data.dir={data_dir}", f"checkpoint.dir={checkpoint_dir}"]


def production_argv(data_dir: Path, checkpoint_dir: Path, out: Path, *overrides: str) -> list[str]:
    """`python -m train`'s arguments: `fast_overrides`, a loss logged every step, no evaluation, a
    checkpoint every 5 steps, the run's folder `out`; later overrides win."""
    fast = fast_overrides(data_dir, checkpoint_dir)
    every = ("train.log_every=1", "train.eval_every=0", "checkpoint.every_steps=5")
    return [*fast, *every, f"hydra.run.dir={out}", *overrides]


@pytest.fixture
def make_config(synthetic_dir: Path, tmp_path: Path) -> Callable[..., object]:
    """Compose a fast CPU config pointed at the shared data and a per-test checkpoint folder;
    later overrides win over the FAST defaults."""

    def make(*overrides: str):
        return compose_config([*fast_overrides(synthetic_dir, tmp_path / "ckpt"), *overrides])

    return make


@pytest.fixture
def learning_run(make_config: Callable[..., object]) -> Callable[..., tuple[object, list[dict]]]:
    """The production run (`python -m train`'s run) of the tiny preset for `steps` steps, on a
    schedule it learns on within a few dozen steps; returns its config and its history, after
    checking that every step ran."""

    def run(steps: int, *overrides: str) -> tuple[object, list[dict]]:
        import train.__main__ as main_mod  # torch: only for the tests that train

        schedule = ("optim.lr=5e-3", "optim.min_lr=5e-4", "optim.warmup_steps=5")
        cfg = make_config(f"train.max_steps={steps}", *schedule, *overrides)
        summary = main_mod.run(cfg)
        assert (summary["start_step"], summary["end_step"]) == (0, steps)
        return cfg, summary["history"]

    return run


def run_python(
    args: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python <args>` with the project's interpreter and exactly `env`, output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def python_says(code: str, *, env: Mapping[str, str], cwd: Path | None = None) -> str:
    """What `python -c <code>` prints to stdout; it must exit 0 within two minutes."""
    proc = run_python(["-c", code], env=env, cwd=cwd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def run_cli(
    module: str,
    args: Sequence[str],
    *,
    cwd: Path,
    timeout: float = 300,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m <module> <args>` with the project's interpreter, in `cwd`, output captured."""
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT_DIR),
        "HYDRA_FULL_ERROR": "0",
        **(extra_env or {}),
    }
    return run_python(["-m", module, *args], env=env, cwd=cwd, timeout=timeout)


def sigkill_after_checkpoint(args: Sequence[str], *, checkpoint: Path, cwd: Path) -> None:
    """Start `python -m train <args>`, SIGKILL it as soon as `checkpoint` exists (a production
    run killed mid-run, after that save), and wait for it to die."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "train", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and proc.poll() is None:
        assert time.monotonic() < deadline, f"no {checkpoint.name} within 120 s"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
