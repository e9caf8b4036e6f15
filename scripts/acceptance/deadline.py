"""Run one child command against a stage's deadline, its output teed to a log file.

At the deadline the child gets SIGTERM, which the sweep handles as Ctrl-C (running trials killed
and recorded as interrupted, so the study stays consistent and the next stage resumes it); what
is left of its process group after a grace period gets SIGKILL. A caller may also stop the child
early when a line of its output says so (the sweep stage stops before a race round that cannot
fit in the stage).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Ran:
    """How a child command ended."""

    returncode: int
    wall_s: float
    cut: bool  # stopped at the deadline
    stopped: str  # why it was stopped early ("" when it was not)


def run_until(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    deadline: float,
    stop_when: Callable[[str], str] | None = None,
    label: str = "child",
    grace_s: float = 15.0,
    clock: Callable[[], float] = time.monotonic,
) -> Ran:
    """Run `argv` until it exits, `deadline` (on `clock`) passes, or `stop_when(line)` returns a
    reason for a line of its output; SIGTERM then, SIGKILL to its group after `grace_s`."""
    started = clock()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stop_reason: list[str] = []
    stop_event = threading.Event()
    with log_path.open("a") as sink:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                sink.write(line)
                sink.flush()
                why = stop_when(line) if stop_when and not stop_reason else ""
                if why:
                    stop_reason.append(why)
                    stop_event.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        cut = False
        while proc.poll() is None:
            left = deadline - clock()
            if stop_event.is_set() or left <= 0:
                cut = not stop_event.is_set()
                why = stop_reason[0] if stop_reason else "deadline"
                _stop(proc, label=label, grace_s=grace_s, why=why)
                break
            # a short poll: a stage lasts minutes, and a cut should land within 0.1 s of its
            # deadline (a tiny dry-run trial can finish inside a 1 s wait, and then nothing is cut)
            stop_event.wait(timeout=min(0.1, max(0.05, left)))
        code = proc.wait()
        reader.join(timeout=10)
        _kill_group(proc.pid)  # whatever the child left behind (its group is ours)
    return Ran(
        returncode=code,
        wall_s=clock() - started,
        cut=cut,
        stopped=stop_reason[0] if stop_reason else "",
    )


def _stop(proc: subprocess.Popen, *, label: str, grace_s: float, why: str) -> None:
    log.warning("stopping the %s (pid %d): %s", label, proc.pid, why)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning("pid %d still running %.0f s after SIGTERM: SIGKILL", proc.pid, grace_s)
        _kill_group(proc.pid)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
