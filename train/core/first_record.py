"""A sweep's record of things measured once: the first trial to measure one writes it, every
later trial reads it back. A small JSON file shared by the sweep's trial processes (a file lock
keeps parallel trials honest; a missing or unreadable record only means measuring again). Each
kind of measurement keeps its own section: each graph's first compile (compile_graphs.py), each
checkpoint target's save (save_record.py). Pure file I/O; no torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

VERSION = 1
_LOCK_FIX = (
    "lock file {lock} is unusable: remove what is there (a regular file is made in its place)"
)


def open_lock_file(lock: str | Path) -> int:
    """A read-write descriptor of the lock file `lock`, made if absent. Anything but a regular
    file there (a folder, a pipe, a link, which is never followed: a planted link would have the
    lock's holder write where it points) is refused in one line naming the path and the fix."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        raise ValueError(f"{_LOCK_FIX.format(lock=lock)} ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(_LOCK_FIX.format(lock=lock) + " (not a regular file)")
    return fd


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the record's lock (a `.lock` file beside it, `open_lock_file`) for a read-then-write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(f"{path}.lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_section(path: Path, section: str) -> dict[str, dict[str, Any]]:
    """The record's entries of `section` ({} when there is none, or it is unreadable)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    entries = doc.get(section) if isinstance(doc, dict) else None
    return entries if isinstance(entries, dict) else {}


def first_wins(
    path: Path, *, section: str, key: str, value: Mapping[str, Any]
) -> tuple[dict[str, Any], bool]:
    """The entry `key` of `section`: the one already recorded (and False), else `value`, written
    now (and True). Other sections are kept as they are."""
    path = Path(path)
    with locked(path):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        entries = doc.get(section) if isinstance(doc.get(section), dict) else {}
        if key in entries:
            return dict(entries[key]), False
        entries[key] = dict(value)
        doc.update({"version": VERSION, section: entries})
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)
    return dict(value), True
