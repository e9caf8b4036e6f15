"""Linux's parent-death signal: a child that must not outlive the process that started it.

Used by the sweeper for exec'd trials (in `preexec_fn`) and by the trial zygote for itself and for
every child it forks. No torch here: the sweeper imports it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, or None off Linux (resolve it before a fork: the child should do little)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent_pid: int, prctl: Callable[..., int] | None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies, even by SIGKILL.

    The signal fires when the *thread* that forked exits. If the parent already died before the
    request was made, it would never fire: exit instead. A no-op without prctl.
    """
    if prctl is None:
        return
    # prctl is variadic over unsigned longs: pass them as such, not as 32-bit ints.
    zero = ctypes.c_ulong(0)
    prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), zero, zero, zero)
    if os.getppid() != parent_pid:
        os._exit(1)
