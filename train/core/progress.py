"""What a watching parent tails while a trial runs: JSON lines of phases, intervals, heartbeats.

The sweeper's runner (sweeper/launch/runner.py) reads these lines to tell progress from a hang: a
heartbeat every few seconds through set-up, compile and warm-up, then the measured window's own
interval lines.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

HEARTBEAT_S = 10.0  # seconds between heartbeat lines during set-up, compile and warm-up


class ProgressFile:
    """JSON lines a watching parent can tail (interval metrics, phase changes, heartbeats); a
    no-op when unset. Safe to write from the heartbeat thread and the main thread alike."""

    def __init__(self, path: str) -> None:
        self._path = Path(path) if path else None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._path is not None

    def write(self, **event) -> None:
        if self._path is None:
            return
        line = json.dumps(event) + "\n"
        with self._lock, self._path.open("a") as f:
            f.write(line)


class Heartbeat:
    """A progress line every `interval_s` while set-up, compile and warm-up run, so a watching
    parent tells a two-minute compile (progress) from a hang (silence).

    It stops before the measured window: from there on the window's own interval lines are the
    progress, and a main thread that hangs in the window goes quiet and is caught as a stall.
    """

    def __init__(self, progress: ProgressFile, *, interval_s: float | None = None) -> None:
        self._progress = progress
        self._interval_s = HEARTBEAT_S if interval_s is None else interval_s
        self._phase = "setup"
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        if self._progress.enabled:
            self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._thread.start()
        return self

    def phase(self, name: str) -> None:
        self._phase = name
        self._progress.write(event="phase", phase=name)

    def _beat(self) -> None:
        while not self._stop.wait(self._interval_s):
            elapsed = round(time.monotonic() - self._started, 1)
            self._progress.write(event="heartbeat", phase=self._phase, elapsed_s=elapsed)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
