"""Which sweep process owns a trial or a run, and whether that process still lives.

A sweep records itself as `host:pid` on what it holds (an Optuna trial, the MLflow parent run), so
that a later sweep can tell work whose owner was killed from work a live sweep still holds.
"""

from __future__ import annotations

import os
import socket


def owner_tag() -> str:
    """`host:pid` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str | None) -> bool | None:
    """Whether the process named by `owner` (`host:pid`) still runs.

    True for a live process on this host (another user's too), False for one that has exited, and
    None when this host cannot tell: the owner ran on another host, the tag is malformed, or it
    names this very process, whose pid may be a previous process's, reused (a restarted container
    starts its processes at the same pids). Callers decide None by other evidence (heartbeats) or
    take the safe side (never take over a run whose owner may live).
    """
    host, sep, pid_text = (owner or "").rpartition(":")
    if not sep or host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    if pid <= 0 or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)  # signal 0: checks that the process exists, delivers nothing
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
