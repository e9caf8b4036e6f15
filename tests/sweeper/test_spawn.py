"""sweeper/launch/spawn.py + train/proc/zygote.py: trials forked from a preloaded process are real
trials.

A forked trial must be indistinguishable from an exec'd one in what it measures and how it ends:
same losses for the same config, its own process group, killable as a group, dead with the zygote.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from sweeper.launch import spawn
from sweeper.launch.job import pin_config, write_trial_config
from sweeper.launch.runner import run_child, trial_argv
from sweeper.launch.spawn import ForkedProcess, Zygote
from tests.conftest import compose_dictconfig, python_says

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the zygote forks (Linux only)")


# Fixed once: pytest changes PYTEST_CURRENT_TEST in os.environ for every test, and a changed
# environment (rightly) makes the zygote decline to fork.
_ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def trial_env() -> dict[str, str]:
    return dict(_ENV)


def argv_for(job_dir: Path, data_dir: Path, *extra: str) -> list[str]:
    """A trial command line as the sweeper builds it: a pinned config file in the job dir."""
    dcfg = compose_dictconfig(
        [
            "model=tiny",
            "runtime.device=cpu",
            "runtime.threads=1",
            "trial.warmup_steps=1",
            "trial.max_steps=3",
            "trial.min_steps=2",
            f"data.dir={data_dir}",
            f"checkpoint.dir={job_dir}/ckpt",
        ]
    )
    job_dir.mkdir(parents=True, exist_ok=True)
    config_file = write_trial_config(pin_config(dcfg), job_dir)
    return trial_argv(
        python=sys.executable, config_file=config_file, job_dir=job_dir, overrides=list(extra)
    )


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(python=sys.executable, env=trial_env(), stderr_path=None)
    yield z
    z.close()


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_trial_measures_exactly_what_an_execd_one_does(zygote, synthetic_dir, tmp_path):
    results = {}
    for how in ("fork", "exec"):
        job = tmp_path / how
        job.mkdir()
        argv = argv_for(job, synthetic_dir)
        if how == "fork":
            proc = zygote.spawn(argv, env=trial_env(), cwd=tmp_path, log_path=job / "trial.log")
            assert isinstance(proc, ForkedProcess)
        else:
            import subprocess

            with open(job / "trial.log", "wb") as log:
                proc = subprocess.Popen(argv, env=trial_env(), stdout=log, stderr=log)
        assert proc.wait(timeout=120) == 0, (job / "trial.log").read_text()[-2000:]
        results[how] = json.loads((job / "result.json").read_text())
    fork, exec_ = results["fork"], results["exec"]
    assert fork["status"] == exec_["status"] == "complete"
    # same seed, same batches, one thread: eager fp32 on a CPU is deterministic
    assert fork["loss"] == exec_["loss"]
    for section in ("model", "batch", "runtime", "data", "optim"):
        assert fork["config"][section] == exec_["config"][section], section
    assert "trial complete" in (tmp_path / "fork" / "trial.log").read_text()


def test_exit_codes_and_signals_come_back_as_popen_would(zygote, synthetic_dir, tmp_path):
    invalid = zygote.spawn(
        argv_for(tmp_path / "bad", synthetic_dir, "trial.max_steps=1"),
        env=trial_env(),
        cwd=tmp_path,
        log_path=tmp_path / "bad.log",
    )
    assert invalid.wait(timeout=60) == 2  # the trial's exit code for an invalid config
    killed = zygote.spawn(
        argv_for(tmp_path / "kill", synthetic_dir, "hooks.fault=sigkill"),
        env=trial_env(),
        cwd=tmp_path,
        log_path=tmp_path / "kill.log",
    )
    assert killed.wait(timeout=60) == -signal.SIGKILL


def test_the_child_leads_its_own_process_group_and_is_killed_with_it(
    zygote, synthetic_dir, tmp_path
):
    job = tmp_path / "hang"
    proc = zygote.spawn(
        argv_for(job, synthetic_dir, "hooks.fault=hang"),
        env=trial_env(),
        cwd=tmp_path,
        log_path=tmp_path / "hang.log",
    )
    assert os.getpgid(proc.pid) == proc.pid
    assert os.getsid(proc.pid) == proc.pid
    with pytest.raises(Exception, match="timed out"):
        proc.wait(timeout=0.5)
    assert proc.poll() is None
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_fork_only_where_it_is_exactly_equivalent(zygote):
    argv = [sys.executable, "-m", "train.trial", "x=1"]
    env = trial_env()
    assert zygote.accepts(argv, env)
    assert zygote.accepts(argv, {**env, "PYTHONUNBUFFERED": "0"})  # set per trial by the runner
    # a secret storage URL reaches trials in the environment, set after the zygote started
    assert zygote.accepts(argv, {**env, "THROUGHPUT_SWEEP_STORAGE": "postgresql://u:pw@h/db"})
    assert not zygote.accepts(argv, {**env, "OMP_NUM_THREADS": "3"})
    assert not zygote.accepts(["/other/python", *argv[1:]], env)
    assert not zygote.accepts([sys.executable, "tests/fake_trial.py", "x=1"], env)


def test_children_die_with_the_zygote(synthetic_dir, tmp_path):
    z = Zygote(python=sys.executable, env=trial_env(), stderr_path=tmp_path / "zygote.log")
    proc = z.spawn(
        argv_for(tmp_path / "hang", synthetic_dir, "hooks.fault=hang"),
        env=trial_env(),
        cwd=tmp_path,
        log_path=tmp_path / "hang.log",
    )
    os.kill(z.pid, signal.SIGKILL)
    assert wait_gone(proc.pid), "a trial outlived its zygote"
    assert proc.wait(timeout=10) == -signal.SIGKILL  # reported as killed, never left waiting
    assert not z.alive
    with pytest.raises(spawn.ZygoteError, match="exited"):
        z.spawn(
            [sys.executable, "-m", "train.trial"],
            env=trial_env(),
            cwd=None,
            log_path=tmp_path / "x.log",
        )
    z.close()


def test_run_child_forks_from_the_main_thread_and_execs_when_disabled(
    synthetic_dir, tmp_path, monkeypatch
):
    """The runner's path: the first trial starts the zygote, the next one reuses it; with
    THROUGHPUT_SWEEP_FORK=0 every trial execs. Both complete the same."""
    spawn.shutdown()
    env = {"PYTHONPATH": str(REPO)}
    forked: list[int] = []
    real_spawn = Zygote.spawn

    def counting_spawn(self, *args, **kw):
        proc = real_spawn(self, *args, **kw)
        forked.append(proc.pid)
        return proc

    monkeypatch.setattr(Zygote, "spawn", counting_spawn)
    try:
        first = run_child(
            argv_for(tmp_path / "a", synthetic_dir), job_dir=tmp_path / "a", timeout_s=120, env=env
        )
        z = spawn._ZYGOTE
        assert z is not None and z.alive
        second = run_child(
            argv_for(tmp_path / "b", synthetic_dir), job_dir=tmp_path / "b", timeout_s=120, env=env
        )
        assert spawn._ZYGOTE is z
        monkeypatch.setenv("THROUGHPUT_SWEEP_FORK", "0")
        third = run_child(
            argv_for(tmp_path / "c", synthetic_dir), job_dir=tmp_path / "c", timeout_s=120, env=env
        )
    finally:
        spawn.shutdown()
    assert [o.state for o in (first, second, third)] == ["complete"] * 3
    assert len(forked) == 2  # the third exec'd
    assert first.result["loss"] == second.result["loss"] == third.result["loss"]
    # the set-up, phase by phase: a forked trial starts with torch imported, an exec'd one pays it
    setups = [o.result["setup"] for o in (first, second, third)]
    for setup in setups:
        phases = (
            "before_trial_s",
            "device_s",
            "checks_s",
            "model_s",
            "attention_probe_s",
            "data_s",
            "fingerprint_s",
            "device_peaks_s",
        )
        assert list(setup) == [*phases, "total_s"], setup  # in the order spent
        assert all(setup[k] >= 0 for k in phases), setup
        assert setup["total_s"] == pytest.approx(sum(setup[k] for k in phases))
    forked_s = max(setups[0]["before_trial_s"], setups[1]["before_trial_s"])
    assert forked_s < setups[2]["before_trial_s"], setups


# Run in a fresh interpreter: this test process may already have asked the CUDA driver (another
# test's torch.cuda.is_available()), and on a GPU host that alone poisons its forks.
_FORK_PROBE = """
import torch
from train.proc import zygote
zygote.check_fork_safe()  # torch imported, the driver not yet asked: forks are clean
print(zygote.forks_poisoned(), torch.cuda.is_available(), zygote.forks_poisoned())
"""


def test_the_zygote_refuses_to_serve_forks_that_could_not_use_cuda(monkeypatch) -> None:
    """Seen on an H100: the preloaded zygote had touched the CUDA driver, and every forked trial
    died with "Cannot re-initialize CUDA in forked subprocess". The zygote now asks a throwaway
    child first and refuses (the sweep then execs every trial)."""
    import threading

    import torch

    from train.proc import zygote

    env = trial_env()
    env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # is_available() then asks the driver itself
    before, has_cuda, after = python_says(_FORK_PROBE, env=env, cwd=REPO).split()
    assert before == "False"
    if has_cuda == "True":
        assert after == "True"  # a GPU host: asking the driver poisons every later fork
    elif torch.version.cuda is None and torch.version.hip is None:
        assert after == "False"  # a CPU-only torch has no driver to ask

    # the refusal, whatever this host: a child that sees a bad fork
    monkeypatch.setattr(zygote.threading, "enumerate", lambda: [threading.main_thread()])
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # other tests' GPU work
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # what a child then sees
    assert zygote.forks_poisoned() is True
    with pytest.raises(RuntimeError, match="touched the CUDA driver"):
        zygote.check_fork_safe()


def test_a_zygote_killed_from_outside_is_restarted_once_then_trials_exec(
    synthetic_dir, tmp_path, caplog
):
    """A zygote SIGKILLed between trials (an operator, a watchdog) is replaced once, in one line;
    killed again, later trials exec. Every trial still completes."""
    spawn.shutdown()
    env = {"PYTHONPATH": str(REPO)}

    def trial(name: str):
        job = tmp_path / name
        return run_child(argv_for(job, synthetic_dir), job_dir=job, timeout_s=120, env=env)

    try:
        with caplog.at_level("WARNING", logger=spawn.__name__):
            outcomes = [trial("a")]
            first = spawn._ZYGOTE
            assert first is not None and first.alive
            os.kill(first.pid, signal.SIGKILL)
            assert first.died(timeout_s=30)
            outcomes.append(trial("b"))
            second = spawn._ZYGOTE
            assert second is not None and second is not first and second.alive
            os.kill(second.pid, signal.SIGKILL)
            assert second.died(timeout_s=30)
            outcomes.append(trial("c"))
            assert spawn._ZYGOTE is None  # exec from now on
    finally:
        spawn.shutdown()
    assert [o.state for o in outcomes] == ["complete"] * 3
    lines = [r.getMessage() for r in caplog.records]
    restarted = [ln for ln in lines if "restarted it once" in ln]
    assert restarted == [
        f"the trial zygote (pid {first.pid}) died (killed by SIGKILL), its "
        f"running trials recorded as killed; restarted it once "
        f"(pid {second.pid})"
    ]
    assert any(f"(pid {second.pid}) died again (killed by SIGKILL)" in ln for ln in lines)
