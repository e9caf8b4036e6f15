"""One sweep folder, one sweep.

Jobs are numbered from the first free folder in the sweep dir (sweeper/launch/batch.py), so two
sweeps writing into one folder would number their trials alike and overwrite each other's results.
A sweep therefore holds an exclusive `flock` on `<sweep dir>/.sweep.lock` for its whole life; a
second sweep on the same folder is refused in one line. The kernel drops the lock when the holder
dies, however it dies, so a killed sweep never leaves its folder locked (its resume goes on there).
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import IO

from sweeper.launch.log_routing import SWEEP_LOG_NAME
from train.core.first_record import open_lock_file

LOCK_NAME = ".sweep.lock"


class SweepDirLock:
    """The held lock of one sweep folder; `release` lets the folder go (and removes what this lock
    created, when the sweep was refused before writing anything else there)."""

    def __init__(self, sweep_dir: Path, handle: IO[str], *, created: list[Path]) -> None:
        self.sweep_dir = sweep_dir
        self._handle: IO[str] | None = handle
        self._created = created  # the folders this lock made, innermost first

    def release(self, *, tidy: bool = False) -> None:
        """Unlock; with `tidy`, a folder this lock created and nothing else wrote to is removed."""
        if self._handle is None:
            return
        self._handle.close()  # closing the last descriptor drops the flock
        self._handle = None
        if tidy and self._created:
            # the lock and the refused sweep's own log (its lines were printed): both ours
            for name in (LOCK_NAME, SWEEP_LOG_NAME):
                (self.sweep_dir / name).unlink(missing_ok=True)
            for folder in self._created:
                try:
                    folder.rmdir()  # only when empty
                except OSError:
                    return


def lock_sweep_dir(sweep_dir: Path) -> SweepDirLock:
    """Take `sweep_dir` for this sweep, or refuse in one line naming the sweep that holds it."""
    created = [d for d in (sweep_dir, *sweep_dir.parents) if not d.exists()]
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / LOCK_NAME
    handle = os.fdopen(open_lock_file(path), "r+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ValueError(
            f"hydra.sweep.dir={sweep_dir} is in use by another sweep ({holder}): two sweeps in one "
            "folder would number their trials alike and overwrite each other's results; give this "
            "one its own folder (hydra.sweep.dir=<new folder>), or wait for that sweep to end"
        ) from None
    handle.seek(0)
    handle.truncate()
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n")
    handle.flush()
    return SweepDirLock(sweep_dir, handle, created=created)
