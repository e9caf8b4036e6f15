"""How a trial fails: naming what went wrong (`classify`), and failing on purpose (`plant_fault`).

A failure is a result too (train/trial/result.py `Failure`): the sweeper records its kind as the
reason a configuration was refused, never a stack trace.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import traceback

from train.run.loop import check_finite
from train.trial.result import Failure

log = logging.getLogger(__name__)


def classify(exc: BaseException, *, during_setup: bool) -> Failure:
    """The failure's kind: oom, nan, invalid_config (a ValueError before anything ran) or crash."""
    text = f"{type(exc).__name__}: {exc}"
    oom_types = tuple(t for t in (MemoryError, _torch_oom_type()) if t is not None)
    if isinstance(exc, oom_types) or "out of memory" in str(exc).lower():
        return Failure(kind="oom", message=text)
    if isinstance(exc, FloatingPointError):
        return Failure(kind="nan", message=text)
    if isinstance(exc, ValueError) and during_setup:
        return Failure(kind="invalid_config", message=str(exc))
    tail = "".join(traceback.format_exception(exc)[-6:])
    return Failure(kind="crash", message=f"{text}\n{tail}")


def _torch_oom_type() -> type | None:
    import torch

    return getattr(torch.cuda, "OutOfMemoryError", None)


def plant_fault(kind: str) -> None:
    """The trial.fault test hook: fail the way real trials fail, so the sweep's handling is tested
    on real processes (a crash, a NaN loss, an out-of-memory error, a hang, a kill by the OS)."""
    log.warning("trial.fault=%s: planting a failure (test hook)", kind)
    if kind == "crash":
        raise RuntimeError("planted crash (trial.fault=crash)")
    if kind == "nan":
        check_finite(float("nan"), 0)
    if kind == "oom":
        raise MemoryError("planted out of memory (trial.fault=oom)")
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
