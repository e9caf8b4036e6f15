"""sweeper/launch/runner.py and children.py: one trial in a child process, its limits, how its end
is named, and the registry that stops every child.

The child is tests/fake_trial.py, which imitates the trial's files and exit codes on request.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweeper.launch import runner
from sweeper.launch.children import TERM_GRACE_S, kill_all_children, live_children
from sweeper.launch.runner import TrialOutcome, run_child, trial_argv
from tests.model_shapes import TINY

FAKE = Path(__file__).parents[1] / "fake_trial.py"
REPO = Path(__file__).resolve().parents[2]


def fake_argv(job_dir: Path, mode: str, *extra: str) -> list[str]:
    """trial_argv's command line with the fake in place of `-m train.trial`."""
    argv = trial_argv(
        python=sys.executable,
        config_file=job_dir / "trial_config.yaml",
        job_dir=job_dir,
        overrides=[f"fake.mode={mode}", *extra],
    )
    assert argv[1:3] == ["-m", "train.trial"]
    return [argv[0], str(FAKE), *argv[3:]]


def is_alive(pid: int) -> bool:
    """Running and not a zombie (a container's pid 1 may never reap orphans)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_dead(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return False


def wait_for_file(path: Path, within_s: float = 10.0) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.fixture(autouse=True)
def _no_leaks():
    yield
    leaked = live_children()
    kill_all_children(grace_s=0.5)
    assert leaked == [], "run_child left children in the registry"


# --- how a finished child is named -----------------------------------------------------------

MODES = [
    # mode, state, reason pattern (None = no reason), returncode
    ("ok", "complete", None, 0),
    ("pruned", "pruned", None, 0),
    ("oom_json", "oom", r"CUDA out of memory", 3),
    ("nan", "nan", r"loss is nan", 3),
    ("invalid_config", "invalid_config", r"batch\.micro_batch must be >= 1", 2),
    ("crash", "crash", r"(?s)^exit code 1: .*Traceback.*RuntimeError: boom", 1),
    # a SIGKILL with no out-of-memory kill counted in the cgroup is a kill from outside
    ("sigkill", "crash", r"killed by SIGKILL from outside the trial \(no out-of-memory", -9),
    ("exit0_nojson", "crash", r"exited 0 but wrote no result", 0),
]


@pytest.mark.parametrize(("mode", "state", "reason", "returncode"), MODES)
def test_outcome_by_mode(tmp_path, mode, state, reason, returncode):
    out = run_child(fake_argv(tmp_path, mode), job_dir=tmp_path, timeout_s=30)
    assert out.state == state
    assert out.returncode == returncode
    assert out.ok == (state in ("complete", "pruned"))
    if reason is None:
        assert out.reason is None
    else:
        assert out.reason is not None
        assert re.search(reason, out.reason), out.reason
    wrote_json = returncode in (0, 2, 3) and mode != "exit0_nojson"
    assert (out.result is not None) == wrote_json
    assert out.log_path == tmp_path / "trial.log"
    assert f"mode={mode}" in out.log_path.read_text()
    assert live_children() == []


def test_crash_reason_quotes_only_the_log_tail(tmp_path):
    out = run_child(fake_argv(tmp_path, "crash"), job_dir=tmp_path, timeout_s=30)
    assert out.reason is not None
    assert len(out.reason.splitlines()) <= 1 + runner.LOG_TAIL_LINES


def test_on_progress_gets_lines_in_order(tmp_path):
    events: list[dict] = []
    out = run_child(
        fake_argv(tmp_path, "ok", "fake.steps=5"),
        job_dir=tmp_path,
        timeout_s=30,
        on_progress=events.append,
    )
    assert out.state == "complete"
    assert [e["event"] for e in events] == ["warmup_done"] + ["interval"] * 5
    assert [e["step"] for e in events[1:]] == [1, 2, 3, 4, 5]


def test_stale_result_from_an_earlier_run_is_not_reused(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"status": "complete"}))
    out = run_child(fake_argv(tmp_path, "exit0_nojson"), job_dir=tmp_path, timeout_s=30)
    assert (out.state, out.reason) == ("crash", "exited 0 but wrote no result")


# --- limits ----------------------------------------------------------------------------------


def test_hard_timeout_kills_the_whole_group(tmp_path):
    out = run_child(fake_argv(tmp_path, "hang"), job_dir=tmp_path, timeout_s=1.5)
    assert out.state == "timeout"
    assert out.reason is not None and out.reason.startswith("timed out after 1.5 s")
    assert 1.5 <= out.wall_s < 1.5 + TERM_GRACE_S
    assert out.returncode == -signal.SIGTERM
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert wait_dead(grandchild), "the grandchild outlived the trial"


def test_stall_timeout_fires_before_the_hard_timeout(tmp_path):
    out = run_child(
        fake_argv(tmp_path, "hang"), job_dir=tmp_path, timeout_s=30, stall_timeout_s=1.0
    )
    assert out.state == "timeout"
    assert out.reason is not None and out.reason.startswith("stalled: no progress line")
    assert out.wall_s < 10


def test_steady_progress_is_not_a_stall(tmp_path):
    events: list[dict] = []
    out = run_child(
        fake_argv(tmp_path, "busy"),
        job_dir=tmp_path,
        timeout_s=2.0,
        stall_timeout_s=1.0,
        on_progress=events.append,
    )
    assert out.state == "timeout"
    assert out.reason is not None and out.reason.startswith("timed out after 2 s")
    assert len(events) >= 5


def test_heartbeat_lines_are_progress(tmp_path):
    # train/trial/measurement.py sends {"event": "heartbeat"} lines during set-up, compile and
    # warm-up: a set-up longer than the stall limit that sends them is not a hang
    out = run_child(
        fake_argv(tmp_path, "slow_setup"), job_dir=tmp_path, timeout_s=30, stall_timeout_s=1.0
    )
    assert out.state == "complete", out.reason
    assert out.wall_s > 2.0


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"budget": {"trial_timeout_s": 1234.5, "stall_timeout_s": 321.0}}, (1234.5, 321.0)),
        ({"budget": {"trial_timeout_s": 1234.5, "stall_timeout_s": -1.0}}, (1234.5, None)),  # off
        ({"budget": {"trial_timeout_s": 0.0, "stall_timeout_s": 0.0}}, (600.0, 300.0)),  # unsized
        ({}, (600.0, 300.0)),
    ],
)
def test_a_job_reads_its_limits_from_its_overrides(settings, expected):
    from sweeper.launch.job import job_limits
    from sweeper.space.limits import TrialLimits, limit_overrides, trial_limits

    assert job_limits(OmegaConf.create(settings)) == expected
    # what the sweeper writes, the job reads back
    limits = trial_limits(
        TINY,
        device_name="cpu",
        device_type="cpu",
        bf16_supported=False,
        stall_timeout_s=-1.0,
    )
    assert isinstance(limits, TrialLimits)
    written = [o.removeprefix("hydra.sweeper.") for o in limit_overrides(limits)]
    assert job_limits(OmegaConf.from_dotlist(written)) == (600.0, None)


def test_sigterm_ignored_escalates_to_sigkill_and_is_not_called_oom(tmp_path):
    out = run_child(
        fake_argv(tmp_path, "ignore_term"), job_dir=tmp_path, timeout_s=1.0, term_grace_s=0.5
    )
    assert out.state == "timeout"
    assert out.returncode == -signal.SIGKILL
    assert wait_dead(int((tmp_path / "grandchild.pid").read_text()))


def test_result_written_before_a_teardown_hang_is_kept(tmp_path):
    out = run_child(fake_argv(tmp_path, "hang_after_result"), job_dir=tmp_path, timeout_s=1.5)
    assert out.state == "complete"
    assert out.result is not None and out.result["tokens_per_s"] == 1234.5
    assert out.reason is not None and "hung" in out.reason


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"timeout_s": 0}, r"timeout_s must be > 0, got 0"),
        ({"timeout_s": 5, "stall_timeout_s": -1}, r"stall_timeout_s must be > 0 or None, got -1"),
    ],
)
def test_run_child_rejects_bad_limits(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_child(fake_argv(tmp_path, "ok"), job_dir=tmp_path, **kwargs)


# --- no child outlives the sweep -------------------------------------------------------------


def test_kill_all_children_stops_a_running_trial(tmp_path):
    outcomes: list[TrialOutcome] = []
    worker = threading.Thread(
        target=lambda: outcomes.append(
            run_child(fake_argv(tmp_path, "hang"), job_dir=tmp_path, timeout_s=60)
        )
    )
    worker.start()
    grandchild = int(wait_for_file(tmp_path / "grandchild.pid"))
    assert len(live_children()) == 1
    kill_all_children(grace_s=2.0)
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert outcomes[0].state == "crash"
    assert outcomes[0].reason is not None and "kill_all_children" in outcomes[0].reason
    assert live_children() == []
    assert wait_dead(grandchild)


def test_interrupt_while_waiting_kills_the_child_and_reraises(tmp_path):
    def ctrl_c(event: dict) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_child(fake_argv(tmp_path, "hang"), job_dir=tmp_path, timeout_s=60, on_progress=ctrl_c)
    assert live_children() == []
    assert wait_dead(int((tmp_path / "trial.pid").read_text()))
    assert wait_dead(int(wait_for_file(tmp_path / "grandchild.pid")))


def start_sweep(job_dir: Path) -> subprocess.Popen:
    """A separate 'sweep' process running one hanging trial."""
    sweep = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from sweeper.launch.runner import run_child
        run_child({fake_argv(job_dir, "hang")!r}, job_dir=Path({str(job_dir)!r}), timeout_s=60)
    """)
    return subprocess.Popen([sys.executable, "-c", sweep])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_when_the_sweep_is_sigkilled(tmp_path):
    parent = start_sweep(tmp_path)
    try:
        trial = int(wait_for_file(tmp_path / "trial.pid", within_s=20))
        assert is_alive(trial)
        parent.kill()  # SIGKILL: no atexit, no handlers; only the kernel can clean up
        parent.wait()
        assert wait_dead(trial), "the trial outlived a SIGKILLed sweep"
    finally:
        parent.kill()
        # PDEATHSIG reaches only the direct child; kill its group (grandchild) ourselves.
        pid_file = tmp_path / "trial.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def test_sigterm_to_the_sweep_kills_the_trial_group_then_the_sweep(tmp_path):
    parent = start_sweep(tmp_path)
    try:
        grandchild = int(wait_for_file(tmp_path / "grandchild.pid", within_s=20))
        trial = int(wait_for_file(tmp_path / "trial.pid"))
        parent.terminate()
        assert parent.wait(timeout=10) == -signal.SIGTERM  # the default action still happens
        assert wait_dead(trial)
        assert wait_dead(grandchild), "SIGTERM must take the trial's whole group down"
    finally:
        parent.kill()


# --- the command line ------------------------------------------------------------------------


def test_trial_argv_layout(tmp_path):
    argv = trial_argv(
        python="/usr/bin/python3",
        config_file=tmp_path / "trial_config.yaml",
        job_dir=tmp_path,
        overrides=["runtime.compile=default", "batch.micro_batch=4"],
    )
    assert argv == [
        "/usr/bin/python3",
        "-m",
        "train.trial",
        "--pinned",
        str(tmp_path / "trial_config.yaml"),
        f"trial.out={tmp_path}/result.json",
        f"trial.progress_file={tmp_path}/progress.jsonl",
        "runtime.compile=default",
        "batch.micro_batch=4",
    ]


def test_path_with_spaces_and_equals_reaches_the_child_intact(tmp_path):
    job_dir = tmp_path / "my job" / "lr=3e-4,mb:4"
    out = run_child(fake_argv(job_dir, "ok"), job_dir=job_dir, timeout_s=30)
    assert out.state == "complete", out.reason
    assert (job_dir / "result.json").exists()
    assert (job_dir / "progress.jsonl").exists()


# --- the outcome record ----------------------------------------------------------------------


def test_outcome_rejects_an_unknown_state(tmp_path):
    with pytest.raises(ValueError, match=r"TrialOutcome.state must be one of .* got 'weird'"):
        TrialOutcome(state="weird", wall_s=0.0, log_path=tmp_path / "trial.log")


def test_runner_does_not_import_torch():
    code = "import sys, sweeper.launch.runner; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


@pytest.mark.parametrize(
    ("before", "after", "state", "said"),
    [
        (3, 4, "oom", "the kernel killed for memory while it ran (cgroup oom_kill 3 -> 4)"),
        (3, 3, "crash", "from outside the trial (no out-of-memory kill recorded"),
        (None, None, "crash", "no out-of-memory counter readable here"),
    ],
)
def test_a_sigkill_is_out_of_memory_only_with_evidence(tmp_path, before, after, state, said):
    import signal

    got, reason = runner._from_exit(
        -signal.SIGKILL, tmp_path / "trial.log", oom_before=before, oom_after=after
    )
    assert got == state and said in reason


def test_the_oom_counter_reads_cgroup_v2_and_v1(tmp_path):
    v2, v1 = tmp_path / "memory.events", tmp_path / "memory.oom_control"
    v2.write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n")
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert runner.oom_kills((v2, v1)) == 2
    assert runner.oom_kills((tmp_path / "absent", v1)) == 5
    assert runner.oom_kills((tmp_path / "absent",)) is None
