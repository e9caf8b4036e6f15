"""The torch threads a race run gets: the production run's, never a parallel launcher's cap.

Hydra's joblib launcher runs each job in a loky worker process, and joblib caps every worker's
native thread pools at cpus // n_jobs (OMP_NUM_THREADS, MKL_NUM_THREADS, ... set in the worker's
environment, which the trial inherits) so that parallel jobs do not oversubscribe the cores. That
is right for the search, whose trials share the machine. The race runs one config at a time, as
the production run (`python -m train --config-name best`, from a shell with no such cap) will:
timed under the cap, a CPU winner verified at 25.6k tokens/s trained at 39-44k from its
best.yaml (issue 24). So a race run whose config leaves `runtime.threads` at 0 (torch's default)
is given the production run's default explicitly: the thread count torch picks in a fresh process
with this sweep's own environment, asked once of a child (the sweeper never imports torch).

An explicit `runtime.threads` (set by the user or searched) is kept; so is a data-parallel
config (`runtime.nproc` > 1), whose ranks share the cores out themselves (train/run/loop.py
`cpu_threads`).
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys

from train.core.keys import NPROC, THREADS

log = logging.getLogger(__name__)

# launchers whose jobs run under a thread cap of their own (joblib's loky workers)
CAPPING_LAUNCHERS = ("JoblibLauncher",)


def caps_threads(launcher: str) -> bool:
    """This launcher's jobs run with their native thread pools capped (by class name)."""
    return launcher in CAPPING_LAUNCHERS


@functools.cache
def production_threads() -> int:
    """torch's default intra-op thread count in a fresh process with this process's environment
    (what `python -m train` with runtime.threads=0 runs at); 0 where it cannot be asked."""
    code = "import torch; print(torch.get_num_threads())"
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
        )
        return int(out.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as exc:
        log.warning(
            "could not ask torch for its default thread count (%s): the race runs "
            "under the launcher's thread cap",
            exc,
        )
        return 0


def last_value(overrides: list[str], key: str) -> str | None:
    """The value the last `key=value` (or `+key=` / `++key=`) override sets, as written."""
    value = None
    for item in overrides:
        name, sep, rest = item.partition("=")
        if sep and name.lstrip("+") == key:
            value = rest
    return value


def uncapped(
    overrides: list[str], *, base: dict, launcher: str, threads: int | None = None
) -> list[str]:
    """`overrides` for a race run: with `runtime.threads=<the production default>` appended where
    the launcher caps its jobs' threads and the config leaves them to torch's default (0) in one
    process. `base`: the sweep's flat base config; `threads`: the production default (asked of
    torch when None)."""
    if not caps_threads(launcher):
        return overrides
    requested = last_value(overrides, THREADS)
    requested = base.get(THREADS, 0) if requested is None else requested
    nproc = last_value(overrides, NPROC)
    nproc = base.get(NPROC, 1) if nproc is None else nproc
    if str(requested) not in ("0", "None", "null") or str(nproc) not in ("1", "None", "null"):
        return overrides
    threads = production_threads() if threads is None else threads
    return [*overrides, f"{THREADS}={threads}"] if threads > 0 else overrides
