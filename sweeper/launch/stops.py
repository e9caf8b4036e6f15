"""A stop (Ctrl-C, SIGTERM) held back while the sweep records a finished trial.

A finished trial is recorded in two stores, its MLflow run first (its run id goes into the trial's
attributes) and then the study's tell. A stop that lands between the two found the trial still
RUNNING, recorded it as interrupted and gave it a second MLflow run: one trial, two runs, and a
completed measurement called interrupted. Inside `stops_deferred` a stop is only noted; it is
delivered, to the handler that was in place, as soon as the record is whole.

Python runs signal handlers in the main thread whichever thread the kernel picked, so blocking
the signal in the main thread (pthread_sigmask) would not hold it back while trial threads run:
the handlers themselves are swapped for one that notes the signal.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOPS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Run the block whole: a SIGINT or SIGTERM that arrives meanwhile is raised again (once)
    right after it, to the handler the block found. Outside the main thread (where no handler
    can be set) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def note(signum: int, _frame: object) -> None:
        caught.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in STOPS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])
