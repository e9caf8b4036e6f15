"""Run one trial in a child process under a hard time limit, and name how it ended.

The child (`python -m train.trial ...`) does all the torch work; this module only starts it, watches
its progress file and log, kills its whole process group when it overruns or hangs, and reads the
result JSON it leaves behind. No child may outlive the sweep: each one runs in its own session (so
its DataLoader and compile workers can be killed together), gets SIGKILL from the kernel if the
thread that started it dies (Linux `PR_SET_PDEATHSIG`), and is killed on interpreter exit, SIGTERM
and SIGHUP through the registry of live children (sweeper/launch/children.py).

Deliberately light: no torch, no `train.*` imports.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sweeper.launch.children import (
    TERM_GRACE_S,
    Child,
    forget,
    install_signal_handlers,
    preexec_pdeathsig,
    register,
    signal_group,
    stop,
)
from sweeper.launch.spawn import start_trial_process
from sweeper.space.overrides import hydra_quote
from train.core.result import (
    FAILURE_KINDS,
    MEASURED_STATES,
    RESULT_NAME,
    TRIAL_STATES,
    ResultError,
    TrialResult,
    load_result,
)

log = logging.getLogger(__name__)

POLL_S = 0.2  # how often the parent looks at the child; small next to any useful timeout
LOG_TAIL_LINES = 20  # lines of trial.log quoted in a crash reason
PROGRESS_NAME, LOG_NAME = "progress.jsonl", "trial.log"


@dataclass(kw_only=True)
class TrialOutcome:
    # one of TRIAL_STATES (train/core/result.py)
    state: str
    # human-readable why (None for a clean complete/pruned)
    reason: str | None = None
    # the parsed trial result JSON, when the child wrote one
    result: TrialResult | None = None
    # the child's exit status; negative = killed by that signal (None if never reaped)
    returncode: int | None = None
    # seconds from start to the child being reaped
    wall_s: float
    # stdout+stderr of the child
    log_path: Path

    def __post_init__(self) -> None:
        if self.state not in TRIAL_STATES:
            raise ValueError(
                f"TrialOutcome.state must be one of {TRIAL_STATES}, got {self.state!r}"
            )

    @property
    def ok(self) -> bool:
        """Whether the trial produced a usable measurement (a pruned one still reports values)."""
        return self.state in MEASURED_STATES


# ---------------------------------------------------------------------------------------------
# argv


def trial_argv(*, python: str, config_file: Path, job_dir: Path, overrides: list[str]) -> list[str]:
    """The child's command line: the trainer's trial entry point on a pinned config file
    (`--pinned`: no Hydra composition, train/trial/pinned.py), writing into `job_dir`."""
    job_dir = Path(job_dir)
    return [
        python,
        "-m",
        "train.trial",
        "--pinned",
        str(config_file),
        f"trial.out={hydra_quote(str(job_dir / RESULT_NAME))}",
        f"trial.progress_file={hydra_quote(str(job_dir / PROGRESS_NAME))}",
        *overrides,
    ]


# ---------------------------------------------------------------------------------------------
# watching the child


class _ProgressTail:
    """Reads whole JSON lines appended to the progress file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> tuple[list[dict], bool]:
        """New events, and whether the file grew at all (a partial line counts as activity)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return [], False
        if not chunk:
            return [], False
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                log.warning("skipping a malformed progress line in %s: %r", self.path, line[:200])
                continue
            if isinstance(event, dict):
                events.append(event)
        return events, True


def _log_tail(path: Path, n_lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-n_lines:])


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_result(path: Path) -> tuple[TrialResult | None, str | None]:
    """The trial JSON (written atomically by the child), or why it could not be read."""
    if not path.exists():
        return None, None
    try:
        return load_result(path), None
    except ResultError as exc:
        return None, str(exc)


def _from_result(doc: TrialResult) -> tuple[str, str | None]:
    """State and reason from a result JSON (train/core/result.py)."""
    status = doc.get("status")
    if status in MEASURED_STATES:
        return status, None
    if status == "failed":
        failure = doc.get("failure") or {}
        kind = failure.get("kind")
        message = failure.get("message") or "the trial recorded a failure without a message"
        return (kind if kind in FAILURE_KINDS else "crash"), message
    return "crash", f"result JSON has unknown status {status!r}"


# The kernel's count of out-of-memory kills in this process's memory cgroup, readable without
# privileges (dmesg is not): cgroup v2's memory.events, v1's memory.oom_control.
OOM_COUNTERS = (
    Path("/sys/fs/cgroup/memory.events"),
    Path("/sys/fs/cgroup/memory/memory.oom_control"),
)


def oom_kills(counters: tuple[Path, ...] = OOM_COUNTERS) -> int | None:
    """The cgroup's `oom_kill` count, or None where no counter can be read."""
    for path in counters:
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def _from_exit(
    returncode: int, log_path: Path, *, oom_before: int | None = None, oom_after: int | None = None
) -> tuple[str, str]:
    """State and reason for a child that left no result JSON. A SIGKILL is an out-of-memory
    verdict only with evidence (the cgroup's oom_kill count rose while the child ran): "oom"
    excludes larger micro-batches from the search, so a kill from outside (a user, a zygote that
    died, a job scheduler) must not."""
    if returncode == -signal.SIGKILL:
        if oom_before is not None and oom_after is not None and oom_after > oom_before:
            return "oom", (
                f"killed by SIGKILL: the kernel killed for memory while it ran "
                f"(cgroup oom_kill {oom_before} -> {oom_after})"
            )
        evidence = (
            "no out-of-memory kill recorded (cgroup oom_kill unchanged)"
            if oom_before is not None and oom_after is not None
            else "no out-of-memory counter readable here"
        )
        return "crash", f"killed by SIGKILL from outside the trial ({evidence})"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return "crash", f"killed by {name}"
    if returncode == 0:
        return "crash", "exited 0 but wrote no result"
    tail = _log_tail(log_path)
    return "crash", f"exit code {returncode}: {tail}" if tail else f"exit code {returncode}"


def child_environment(env: dict | None = None) -> dict[str, str]:
    """A trial's environment: `env` over ours, output unbuffered (so log growth is a live
    heartbeat for the stall check)."""
    return {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}


def run_child(
    argv: list[str],
    *,
    job_dir: Path,
    timeout_s: float,
    stall_timeout_s: float | None = None,
    env: dict | None = None,
    cwd: Path | None = None,
    on_progress: Callable[[dict], None] | None = None,
    term_grace_s: float = TERM_GRACE_S,
) -> TrialOutcome:
    """Run `argv` to completion or to its limit, and classify the outcome.

    The child writes job_dir/progress.jsonl (tailed into `on_progress`) and job_dir/result.json;
    its stdout+stderr go to job_dir/trial.log. `timeout_s` bounds the wall clock; `stall_timeout_s`,
    if given, bounds the time with neither a new progress line nor log output. `env` is layered over
    os.environ. Any exception here (Ctrl-C, or one raised by `on_progress`) kills the child's whole
    process group before it propagates.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if stall_timeout_s is not None and stall_timeout_s <= 0:
        raise ValueError(f"stall_timeout_s must be > 0 or None, got {stall_timeout_s}")
    job_dir = Path(job_dir)
    log_path, result_path = _clean_job_dir(job_dir)
    child_env = child_environment(env)
    install_signal_handlers()
    start = time.monotonic()
    oom_before = oom_kills()
    child = _start(argv, env=child_env, cwd=cwd, log_path=log_path)
    try:
        timeout_reason = _watch(
            child,
            _ProgressTail(job_dir / PROGRESS_NAME),
            log_path=log_path,
            start=start,
            timeout_s=timeout_s,
            stall_timeout_s=stall_timeout_s,
            on_progress=on_progress,
            term_grace_s=term_grace_s,
        )
    except BaseException:
        stop(child, why="interrupted", grace_s=term_grace_s)
        raise
    finally:
        _reap(child, grace_s=term_grace_s)
    wall_s = time.monotonic() - start
    return _classify(
        child, timeout_reason, result_path, log_path, wall_s, oom=(oom_before, oom_kills())
    )


def _clean_job_dir(job_dir: Path) -> tuple[Path, Path]:
    """Make `job_dir` and remove the result and progress files an earlier run in it left, so
    what is read afterwards is this run's; (log path, result path)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    for stale in (job_dir / RESULT_NAME, job_dir / PROGRESS_NAME):
        if stale.exists():
            log.warning("removing %s left by an earlier run in the same job dir", stale)
            stale.unlink()
    return job_dir / LOG_NAME, job_dir / RESULT_NAME


def _start(argv: list[str], *, env: dict, cwd: Path | None, log_path: Path) -> Child:
    """Start the child in its own session, with its parent-death signal, and register it."""
    proc = start_trial_process(
        argv, env=env, cwd=cwd, log_path=log_path, preexec_fn=preexec_pdeathsig(os.getpid())
    )
    child = register(proc)
    log.debug("started trial pid %d: %s", proc.pid, argv)
    return child


def _watch(
    child: Child,
    tail: _ProgressTail,
    *,
    log_path: Path,
    start: float,
    timeout_s: float,
    stall_timeout_s: float | None,
    on_progress: Callable[[dict], None] | None,
    term_grace_s: float,
) -> str | None:
    """Poll the child until it exits, passing its progress lines to `on_progress`; past the hard
    or the stall limit, stop it and return why (None when it exited by itself)."""
    proc, last_activity, log_size = child.proc, start, 0

    def drain() -> None:
        nonlocal last_activity, log_size
        events, grew = tail.read()
        size = _file_size(log_path)
        if grew or size != log_size:
            last_activity, log_size = time.monotonic(), size
        for event in events:
            if on_progress is not None:
                on_progress(event)

    timeout_reason: str | None = None
    while True:
        try:
            proc.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        drain()
        now = time.monotonic()
        timeout_reason = _overrun(now - start, now - last_activity, timeout_s, stall_timeout_s)
        if timeout_reason is not None:
            log.warning("trial pid %d %s", proc.pid, timeout_reason)
            stop(child, why=timeout_reason, grace_s=term_grace_s)
            break
    drain()  # lines written just before exit
    return timeout_reason


def _overrun(
    elapsed_s: float, quiet_s: float, timeout_s: float, stall_timeout_s: float | None
) -> str | None:
    """Why a child still running after `elapsed_s`, quiet for `quiet_s`, must be stopped; None
    while it is within both limits."""
    if elapsed_s >= timeout_s:
        return f"timed out after {timeout_s:g} s (no progress for {quiet_s:.0f} s)"
    if stall_timeout_s is not None and quiet_s >= stall_timeout_s:
        return (
            f"stalled: no progress line or log output for {quiet_s:.0f} s "
            f"(limit {stall_timeout_s:g} s), killed after {elapsed_s:.0f} s"
        )
    return None


def _reap(child: Child, *, grace_s: float) -> None:
    """Sweep up stragglers (workers the leader failed to reap), then forget the child."""
    signal_group(child.proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.proc.wait(timeout=grace_s)
    forget(child)


def _classify(
    child: Child,
    timeout_reason: str | None,
    result_path: Path,
    log_path: Path,
    wall_s: float,
    oom: tuple[int | None, int | None] = (None, None),
) -> TrialOutcome:
    returncode = child.proc.returncode
    result, unreadable = _read_result(result_path)
    done = dict(result=result, returncode=returncode, wall_s=wall_s, log_path=log_path)
    if timeout_reason is not None:
        if result is not None and result.get("status") in MEASURED_STATES:
            # The measurement finished; only teardown hung (e.g. a worker that never exits).
            state, _ = _from_result(result)
            return TrialOutcome(
                state=state,
                reason=f"result written, then the process hung: {timeout_reason}",
                **done,
            )
        return TrialOutcome(state="timeout", reason=timeout_reason, **done)
    if result is not None:
        state, reason = _from_result(result)
        return TrialOutcome(state=state, reason=reason, **done)
    if child.killed_by_us is not None:
        return TrialOutcome(state="crash", reason=child.killed_by_us, **done)
    if returncode is None:  # unreapable (e.g. stuck in uninterruptible I/O)
        return TrialOutcome(state="crash", reason="the process could not be reaped", **done)
    state, reason = _from_exit(returncode, log_path, oom_before=oom[0], oom_after=oom[1])
    if unreadable:
        reason = f"{reason}; {unreadable}"
    return TrialOutcome(state=state, reason=reason, **done)
