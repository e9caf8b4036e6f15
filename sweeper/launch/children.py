"""The registry of live trial children: nothing the sweep starts may outlive it.

Each child runs in its own session (its pid is its process-group id), so stopping it signals its
whole group: its DataLoader and compile workers too. Every live child is stopped on interpreter
exit (atexit), on SIGTERM and SIGHUP (handlers chained in front of the previous ones, whose default
action would skip atexit), and by the kernel when the thread that started it dies (Linux
`PR_SET_PDEATHSIG`, set between fork and exec). sweeper/launch/runner.py starts and watches the
children; this module only tracks and stops them.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sweeper.launch.spawn import ForkedProcess
from train.core.deathsig import die_with_parent, libc_prctl

log = logging.getLogger(__name__)

TERM_GRACE_S = 5.0  # SIGTERM -> SIGKILL grace, time enough to flush a log line


@dataclass(kw_only=True)
class Child:
    # the running child (its pid is also its process-group id: it runs in its own session)
    proc: subprocess.Popen | ForkedProcess
    # set when we decided to kill it, so a SIGKILL of ours is not mistaken for the OOM killer
    killed_by_us: str | None = None


# pid -> child. Plain dict ops only (atomic under the GIL): this is touched from signal handlers.
_LIVE: dict[int, Child] = {}
_PREV_HANDLERS: dict[int, object] = {}


def live_children() -> list[int]:
    """Pids of the children currently running (for tests and diagnostics)."""
    return list(_LIVE)


def register(proc: subprocess.Popen | ForkedProcess) -> Child:
    """A started child, registered until `forget`: every exit path of the sweep stops it."""
    child = Child(proc=proc)
    _LIVE[proc.pid] = child
    return child


def forget(child: Child) -> None:
    """Drop a reaped child from the registry."""
    _LIVE.pop(child.proc.pid, None)


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop(child: Child, *, why: str, grace_s: float) -> None:
    """SIGTERM the child's group, give it `grace_s` to exit, then SIGKILL the group."""
    child.killed_by_us = child.killed_by_us or why
    pid = child.proc.pid
    signal_group(pid, signal.SIGTERM)
    try:
        child.proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning("trial pid %d ignored SIGTERM for %.0f s; sending SIGKILL", pid, grace_s)
    # Always: workers may still be alive after the leader exits on SIGTERM.
    signal_group(pid, signal.SIGKILL)


def kill_all_children(grace_s: float = TERM_GRACE_S) -> None:
    """Stop every live child's process group (atexit, SIGTERM/SIGHUP, or by hand)."""
    children = list(_LIVE.values())
    for child in children:
        child.killed_by_us = child.killed_by_us or "stopped by kill_all_children (sweep exiting)"
        signal_group(child.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        signal_group(child.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=1.0)
        _LIVE.pop(child.proc.pid, None)
    if children:
        log.warning("killed %d running trial(s)", len(children))


atexit.register(kill_all_children)


def _on_fatal_signal(signum: int, frame) -> None:
    """Kill our children, then let the signal do what it would have done without us."""
    kill_all_children()
    prev = _PREV_HANDLERS.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install_signal_handlers() -> None:
    """Chain in front of SIGTERM/SIGHUP, whose default action would skip atexit.

    SIGINT needs nothing: it raises KeyboardInterrupt, which run_child turns into a kill.
    Only the main thread may set handlers; elsewhere atexit and PDEATHSIG still cover us.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(signum)
        if current is _on_fatal_signal:
            continue
        _PREV_HANDLERS[signum] = current
        signal.signal(signum, _on_fatal_signal)


# Resolved in the parent: the forked child should do as little as possible before exec
# (preexec_fn runs between fork and exec, where taking locks other threads held can deadlock).
_PRCTL = libc_prctl()


def preexec_pdeathsig(parent_pid: int) -> Callable[[], None]:
    """The child's parent-death signal (train/core/deathsig.py), set between fork and exec.

    Popen runs setsid() (start_new_session=True) before preexec_fn, so this runs in the new session.
    The death signal fires when the *thread* that forked exits, so call run_child from a thread
    that lives as long as the trial (Hydra's launchers do).
    """

    def preexec() -> None:
        die_with_parent(parent_pid, _PRCTL)

    return preexec
