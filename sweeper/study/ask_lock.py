"""One worker asks at a time: the trial budget's check and the ask are one step across workers.

Workers sharing a study each read how many trials it has spent and run, then ask for one more.
Optuna has no atomic "ask if under budget", so two workers that read the count within the same
moments both asked, and the study ran n_trials + 1 (CI saw it on a loaded machine). The lock is a
marker study `<study>.ask-lock` (sweeper/study/marker.py), as the export claim is: the database
refuses a second study of one name, on SQLite and PostgreSQL alike, so one worker holds it; it is
held for the check and the ask (milliseconds) and deleted at once.

A lock whose holder died on this host is taken over at once; one whose holder this host cannot see
(another host, or a process killed before it signed the lock) after TAKEOVER_S of waiting.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

import optuna

from sweeper.study import marker
from sweeper.study.optuna_study import storage_of
from sweeper.study.owner import owner_alive

log = logging.getLogger(__name__)

LOCK_SUFFIX = ".ask-lock"
POLL_S = 0.05  # between tries while another worker holds the lock
# A check and an ask take well under a second, seconds on a loaded machine: a lock held this long
# belongs to a worker that died holding it.
TAKEOVER_S = 60.0


@contextlib.contextmanager
def ask_lock(study: optuna.Study) -> Iterator[None]:
    """Hold the study's ask lock for the block (module doc)."""
    name = f"{study.study_name}{LOCK_SUFFIX}"
    storage = storage_of(study)
    deadline = time.monotonic() + TAKEOVER_S
    while marker.take(name, storage) is None:
        holder = marker.holder(name, storage)
        if owner_alive(holder) is False or time.monotonic() > deadline:
            log.warning("taking over the ask lock of %s from %s", study.study_name, holder)
            marker.release(name, storage)
            deadline = time.monotonic() + TAKEOVER_S
        else:
            time.sleep(POLL_S)
    try:
        yield
    finally:
        marker.release(name, storage)
