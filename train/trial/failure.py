"""How a trial fails: naming what went wrong (`classify`), and failing on purpose (`plant_fault`).

A failure is a result too (train/core/result.py `Failure`): the sweeper records its kind as the
reason a configuration was refused, never a stack trace.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
import traceback
from typing import TYPE_CHECKING

from train.core.compile_cache import cache_failure
from train.core.disk_full import DISK_FULL_ERRNOS, disk_full_errno
from train.core.result import Failure
from train.run.checkpoint import CheckpointDiskFull, checkpoint_path
from train.run.loop import check_finite

if TYPE_CHECKING:
    from train.run.loop import Session

log = logging.getLogger(__name__)


def classify(exc: BaseException, *, during_setup: bool, compile_cache: str = "") -> Failure:
    """The failure's kind: disk_full, oom, nan, invalid_config (a ValueError before anything
    ran) or crash. A disk_full message is one line: the path, the free space and the fix; so is a
    crash on a damaged file of the `compile_cache` folder."""
    text = f"{type(exc).__name__}: {exc}"
    full = _disk_full(exc)
    if full is not None:
        return Failure(kind="disk_full", message=full)
    damaged = cache_failure(exc, compile_cache)
    if damaged is not None:
        return Failure(kind="crash", message=damaged)
    oom_types = tuple(t for t in (MemoryError, _torch_oom_type()) if t is not None)
    if isinstance(exc, oom_types) or "out of memory" in str(exc).lower():
        return Failure(kind="oom", message=text)
    if isinstance(exc, FloatingPointError):
        return Failure(kind="nan", message=text)
    if isinstance(exc, ValueError) and during_setup:
        return Failure(kind="invalid_config", message=str(exc))
    tail = "".join(traceback.format_exception(exc)[-6:])
    return Failure(kind="crash", message=f"{text}\n{tail}")


def _disk_full(exc: BaseException) -> str | None:
    """The one-line reason when `exc` (or a cause) is a write that found no room, else None."""
    e: BaseException | None = exc
    while e is not None:
        if isinstance(e, CheckpointDiskFull):
            return str(e)
        e = e.__cause__ or e.__context__
    code = disk_full_errno(exc)
    if code is None:
        return None
    return f"disk full: {DISK_FULL_ERRNOS[code]} ({exc}); free space there or write elsewhere"


def _torch_oom_type() -> type | None:
    import torch

    return getattr(torch.cuda, "OutOfMemoryError", None)


def plant_fault(kind: str, session: Session | None = None) -> None:
    """The hooks.fault test hook: fail the way real trials fail, so the sweep's handling is tested
    on real processes (a crash, a NaN loss, an out-of-memory error, a hang, a kill by the OS, a
    checkpoint written to a full disk)."""
    if kind == "coarse_weights":  # a precision loss the trial survives, not a failure
        from train.trial.coarse import plant_coarse_weights

        if session is None:
            raise ValueError("hooks.fault=coarse_weights needs the trial's session")
        plant_coarse_weights(session)
        return
    log.warning("hooks.fault=%s: planting a failure (test hook)", kind)
    if kind == "disk_full":
        if session is None:
            raise ValueError("hooks.fault=disk_full needs the trial's session")
        save_to_full_disk(session)
    if kind == "crash":
        raise RuntimeError("planted crash (hooks.fault=crash)")
    if kind == "nan":
        check_finite(float("nan"), 0)
    if kind == "oom":
        raise MemoryError("planted out of memory (hooks.fault=oom)")
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)


FULL_DEVICE = "/dev/full"  # Linux: every write fails with ENOSPC, as on a disk that is full


def save_to_full_disk(s: Session) -> None:
    """Checkpoint the session now into a full disk: the checkpoint's temporary file is a link to
    /dev/full, so the real writer (torch.save, flush, fsync) meets the kernel's real ENOSPC.
    Without /dev/full (not Linux), the ENOSPC is raised here instead."""
    ckpt = s.checkpointer
    tmp = checkpoint_path(ckpt.dir, 0).with_name(checkpoint_path(ckpt.dir, 0).name + ".tmp")
    if not os.path.exists(FULL_DEVICE):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    ckpt.dir.mkdir(parents=True, exist_ok=True)
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(FULL_DEVICE)
    ckpt.save(step=0, model=s.raw_model, optimizer=s.optimizer, extra={})
    ckpt.wait()  # an async write fails in the background; surface it now
