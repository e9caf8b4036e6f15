"""A sweep that ran out of room: where, and the one line that says what was kept and how to go on.

Anything the sweep writes can meet a full disk: a trial's folder (Hydra's .hydra/*.yaml, logs,
results), the Optuna database ("database or disk is full", SQLite's word for it) or the log files.
A trial's own write fails inside the trial and is recorded as that trial's failure; a write of the
sweep itself ends the sweep with `disk_full_line`, never a traceback. Log handlers meeting a full
disk say so once per file (`tolerate_full_disks`) instead of printing a traceback per record.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from train.core.disk_full import DISK_FULL_ERRNOS, causes, free_bytes

SQLITE_FULL = "database or disk is full"


def full_disk(exc: BaseException) -> tuple[str, str | None] | None:
    """(what was refused, the file written or None) when `exc` or a cause says the disk is full
    (ENOSPC, EDQUOT, EROFS; SQLite's "database or disk is full"), else None."""
    for e in causes(exc):
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return DISK_FULL_ERRNOS[e.errno], e.filename and str(e.filename)
    for e in causes(exc):
        if SQLITE_FULL in str(e):
            return SQLITE_FULL, None
    return None


def _sqlite_file(url: str) -> Path | None:
    return Path(url.split(":///", 1)[1]) if url.startswith("sqlite:///") else None


def disk_full_line(
    exc: BaseException, *, sweep_dir: Path, storage: str | None, resume: str | None
) -> str | None:
    """The sweep's one line for a full disk met by its own writes (None for any other error):
    what and where, the free space, what is kept, and the command that resumes."""
    found = full_disk(exc)
    if found is None:
        return None
    why, filename = found
    db = _sqlite_file(storage or "")
    if why == SQLITE_FULL and db is not None:  # SQLite names no file: it is the study's database
        target, setting = db, "hydra.sweeper.storage"
    else:
        target = Path(filename) if filename else sweep_dir
        inside = target == sweep_dir or sweep_dir in target.parents
        setting = "hydra.sweep.dir" if inside else "the folder"
    free = free_bytes(target.parent)
    room = "unknown" if free is None else f"{free / 1e6:,.1f} MB"
    kept = f"kept: every finished trial in the study ({storage})" if storage else "kept"
    go_on = f"; resume with: {resume}" if resume else ""
    return (
        f"disk full: {why} writing {target} ({room} free there); {kept} and every trial folder "
        f"in {sweep_dir}; free space there or point {setting} at a disk with room{go_on}"
    )


_REPORT_ERROR = logging.Handler.handleError  # the standard library's: a traceback per record
_SAID: set[str] = set()  # the files a full disk has been said for


def _handle_error(handler: logging.Handler, record: logging.LogRecord) -> None:
    exc = sys.exc_info()[1]
    found = full_disk(exc) if exc is not None else None
    if found is None:
        _REPORT_ERROR(handler, record)
        return
    where = str(getattr(handler, "baseFilename", None) or getattr(handler, "path", "a log file"))
    if where not in _SAID:
        _SAID.add(where)
        sys.stderr.write(
            f"[WARNING] disk full: {found[0]} writing {where}; its later lines are "
            "not written (the console still shows them)\n"
        )


def tolerate_full_disks() -> None:
    """Every log handler of this process (Hydra configures new ones for each job) meets a full
    disk with one line on stderr per file, not a traceback per record; any other handler error
    is reported as logging always does. For the sweep's process only (route_sweep_logging)."""
    logging.Handler.handleError = _handle_error  # type: ignore[method-assign]
