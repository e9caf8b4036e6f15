"""A write that failed for want of room: recognising it, and the one line that says what to do.

Three errnos mean "no room here": ENOSPC (the disk is full), EDQUOT (the user's quota is spent)
and EROFS (the target is read-only). torch's zip writer hides them: a failed write inside
`torch.save` surfaces as "[enforce fail at inline_container.cc:672] . unexpected pos 4704 vs 598"
(torch 2.13) with the OSError only as its `__context__`, or with no OSError at all when the C++
writer owns the file. So the whole chain of causes is searched, and when torch's text is all there
is, the free space of the target decides.

Part of the torch-free core (train/core/): the trial's failure classifier and the checkpointer
share it.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

# errno values that mean "no room to write here", and how a user would say it
DISK_FULL_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
}
# the texts torch's stream writer fails with when a write came up short
TORCH_WRITER_FAILURES = (
    "unexpected pos",
    "PytorchStreamWriter failed writing",
    "file write failed",
)


def causes(exc: BaseException) -> list[BaseException]:
    """`exc` and every exception in its chain of causes (`__cause__` and `__context__`, followed
    to the end), each once, an error before the ones it was raised from."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__context__, e.__cause__]
    return seen


def disk_full_errno(exc: BaseException) -> int | None:
    """The disk-full errno (ENOSPC, EDQUOT, EROFS) of an OSError anywhere in `exc`'s chain of
    causes (`causes`), or None."""
    for e in causes(exc):
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return e.errno
    return None


def torch_writer_failed(exc: BaseException) -> bool:
    """True when `exc` (or a cause) carries torch's short-write text."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if any(marker in str(e) for marker in TORCH_WRITER_FAILURES):
            return True
        e = e.__cause__ or e.__context__
    return False


def free_bytes(dir: Path) -> int | None:
    """Free bytes for an unprivileged user on the disk holding `dir` (its nearest existing
    parent), or None when it cannot be read."""
    for d in (dir, *dir.parents):
        if d.exists():
            try:
                return shutil.disk_usage(d).free
            except OSError:
                return None
    return None


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def disk_full_message(
    *, path: Path, code: int, free: int | None, needed: int, keep: int, kept: Path | None = None
) -> str:
    """The one line a user reads when a checkpoint does not fit: what, where, how much, what
    survived (`kept`, the newest checkpoint that verifies), the fix."""
    survived = (
        f"the newest checkpoint kept is {kept}" if kept is not None else "no earlier checkpoint"
    )
    fix = "checkpoint.dir=<a disk with room>"
    fix += f" or checkpoint.keep={keep - 1}" if keep > 1 else f", or free ~{_size(needed)} there"
    return (
        f"disk full: {DISK_FULL_ERRNOS[code]} writing checkpoint {path} "
        f"({_size(free)} free there, the checkpoint needs ~{_size(needed)}); {survived}; "
        f"fix: {fix}"
    )


def recognise(
    exc: BaseException, *, path: Path, needed: int, keep: int, kept: Path | None = None
) -> str | None:
    """The one-line disk-full message when writing `needed` bytes to `path` failed with `exc`
    for want of room, else None. Room is wanting when a disk-full errno is in the chain, or when
    torch's writer came up short and the target's free space is below `needed`."""
    code = disk_full_errno(exc)
    free = free_bytes(path.parent)
    if code is None and torch_writer_failed(exc) and free is not None and free < needed:
        code = errno.ENOSPC
    if code is None:
        return None
    return disk_full_message(path=path, code=code, free=free, needed=needed, keep=keep, kept=kept)
