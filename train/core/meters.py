"""Clocks and statistics for honest step timing.

A step's time is split into named phases (`with clock.phase("compute"):`). On a CPU the work is
done when the call returns, so `PhaseClock` reads the host clock. On CUDA the host only queues
kernels: `EventPhaseClock` records a CUDA event at each phase boundary on the compute stream and
reads their elapsed times after the step's one synchronize, so measuring never adds a host sync
inside a step (a sync per phase would serialise launch and execution and make launch-bound configs
look slower than the production run, which never syncs mid-step). Both are tested with fake
clocks and a fake event API, and the statistics, pure functions over lists of floats, with tables
of exact numbers (tests/train/test_meters.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

# comms: the gradient all-reduce a data-parallel step waits for after its backward (the part not
# hidden behind it); always 0 in one process
PHASES = ("compute", "data_wait", "optimizer", "checkpoint", "comms")


class _SpanClock:
    """What both step clocks share: `phase()` marks a span's two ends, `add()` charges time
    measured elsewhere, and `take()` reads the spans, sums them per phase and resets. A subclass
    says what a mark is (`_mark`) and how long a span lasted (`_seconds`)."""

    def __init__(self) -> None:
        self._added: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._spans: list[tuple[str, Any, Any]] = []
        self.last_spans: list[tuple[str, float]] = []  # (phase, seconds) in order, as of take()

    def _mark(self) -> Any:
        raise NotImplementedError

    def _seconds(self, start: Any, end: Any) -> float:
        raise NotImplementedError

    def _release(self, mark: Any) -> None:
        """Called once per mark after its spans have been read (the event clock pools events)."""

    def mark(self) -> Any:
        """A mark taken now, outside any phase, for `carve` (data-parallel runs take one as each
        gradient is accumulated, train/run/distributed.py)."""
        return self._mark()

    def discard(self, mark: Any) -> None:
        """Give back a mark that `carve` will not use."""
        self._release(mark)

    def carve(self, mark: Any, *, into: str) -> None:
        """Split the latest span at `mark`: its part after the mark is charged to phase `into`.
        A data-parallel micro-batch's compute span is carved at the moment its last gradient
        bucket was ready: what follows is the all-reduce the step waited for (`comms`)."""
        name, start, end = self._spans.pop()
        self._spans += [(name, start, mark), (into, mark, end)]

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self._mark()
        try:
            yield
        finally:
            self._spans.append((name, start, self._mark()))

    def add(self, name: str, seconds: float) -> None:
        """Charge time measured elsewhere (a checkpoint stall, already synchronised) to a phase."""
        self._added[name] += seconds

    def take(self) -> dict[str, float]:
        """The phase totals since the last take, then reset (after a synchronize, on a device)."""
        totals, self._added = self._added, dict.fromkeys(PHASES, 0.0)
        self.last_spans = []
        marks: dict[int, Any] = {}  # a carved mark ends one span and starts the next
        for name, start, end in self._spans:
            seconds = self._seconds(start, end)
            totals[name] += seconds
            self.last_spans.append((name, seconds))
            marks.update({id(start): start, id(end): end})
        for mark in marks.values():
            self._release(mark)
        self._spans = []
        return totals


class PhaseClock(_SpanClock):
    """Host wall time per phase inside a step (a synchronous device: the CPU); the rest of the
    step is reported as `other`."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self._clock = clock

    def _mark(self) -> float:
        return self._clock()

    def _seconds(self, start: float, end: float) -> float:
        return end - start


class TimingEvent(Protocol):
    """The part of `torch.cuda.Event(enable_timing=True)` the clock uses."""

    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...  # milliseconds from self to end


class EventPhaseClock(_SpanClock):
    """Device time per phase from CUDA events, read after the step's synchronize.

    `phase()` records one event when the phase starts and one when it ends, on the current
    stream; `take()` must follow a synchronize (the trainer's `finish_step`), then sums
    `start.elapsed_time(end)` per phase. What the GPU waits for shows up where it waits: a data
    phase that ends after the consumer stream's `wait_stream` on the copy stream holds the
    host's blocked time (when the GPU ran dry meanwhile) plus the copy's. Events are pooled, so a
    long run records into the same few objects.
    """

    def __init__(self, *, new_event: Callable[[], TimingEvent]) -> None:
        super().__init__()
        self._new_event = new_event
        self._free: list[TimingEvent] = []

    def _mark(self) -> TimingEvent:
        event = self._free.pop() if self._free else self._new_event()
        event.record()
        return event

    def _seconds(self, start: TimingEvent, end: TimingEvent) -> float:
        return start.elapsed_time(end) / 1000.0

    def _release(self, mark: TimingEvent) -> None:
        self._free.append(mark)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]), the same rule as numpy's default."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """p50, p90, mean, sample std, coefficient of variation and count of a set of step times."""
    n = len(values)
    if n == 0:
        raise ValueError("no measured steps to summarize")
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "mean": mean,
        "std": std,
        "cv": std / mean if mean > 0 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": n,
    }


def time_fractions(phase_totals: Sequence[dict[str, float]], step_times: Sequence[float]) -> dict:
    """Share of measured wall time per phase; `other` is what no phase claimed. Sums to 1."""
    wall = sum(step_times)
    if wall <= 0:
        raise ValueError("measured wall time must be positive")
    fracs = {p: sum(t.get(p, 0.0) for t in phase_totals) / wall for p in PHASES}
    claimed = sum(fracs.values())
    if claimed > 1.0:  # clock granularity can overshoot by a hair; rescale rather than go negative
        fracs = {p: f / claimed for p, f in fracs.items()}
        claimed = 1.0
    fracs["other"] = 1.0 - claimed
    return fracs


def window_rate(tokens: int, seconds: float) -> float:
    """Tokens per second over a window, guarding a zero-length window."""
    return tokens / seconds if seconds > 0 else 0.0


def short_step(grad_accum: int, project_micro_steps: int) -> int:
    """Micro-batches in a trial's short step (its warm-up, and its window when projecting)."""
    return min(grad_accum, project_micro_steps)


def projects(
    *, grad_accum: int, project_micro_steps: int, above_s: float, full_step_s: float
) -> bool:
    """Whether a trial measures short steps and projects them: a full step is longer than
    `above_s` (trial.project_above_s; 0 = never) and longer than a short one. The trial decides
    with its warm-up's estimate, the sweeper's limits with a predicted step
    (sweeper/space/limits.py)."""
    return grad_accum > short_step(grad_accum, project_micro_steps) and 0 < above_s < full_step_s


def micro_batch_times(spans: Sequence[tuple[str, float]]) -> list[float]:
    """Each micro-batch's data wait + compute, in order, from a step's (phase, seconds) spans."""
    times, pending = [], 0.0
    for name, seconds in spans:
        if name == "data_wait":
            pending += seconds
        elif name == "compute":
            times.append(pending + seconds)
            pending = 0.0
    return times


def project_step(
    wall_s: float, phases: dict[str, float], *, micro_s: Sequence[float], grad_accum: int
) -> tuple[float, dict[str, float]]:
    """A full optimizer step of `grad_accum` micro-batches projected from a short one.

    `micro_s` holds the short step's micro-batches (data wait + compute each, in order). The
    first micro-batch of a step is not like the rest (its backward writes fresh gradients; later
    ones read and add into them), so the full step's micro-batches are the first plus
    grad_accum - 1 times the mean of the others. The optimizer update, a checkpoint save and the
    step's own overhead (`other`: the sync, the lr update, Python between phases) happen once per
    step whatever its length. Returns the projected step time and its phases (compute and data
    wait scaled alike). A short step of all `grad_accum` micro-batches comes back as measured.
    """
    if not micro_s or len(micro_s) > grad_accum:
        raise ValueError(
            f"a projection needs 1..grad_accum={grad_accum} measured micro-batches, "
            f"got {len(micro_s)}"
        )
    rest = micro_s[1:] or micro_s[:1]
    full_micro = micro_s[0] + (grad_accum - 1) * sum(rest) / len(rest)
    measured = sum(micro_s)
    factor = full_micro / measured if measured > 0 else float(grad_accum) / len(micro_s)
    other = max(0.0, wall_s - sum(phases.values()))
    scaled = dict(phases)
    for name in ("compute", "data_wait"):
        scaled[name] = phases[name] * factor
    return sum(scaled.values()) + other, scaled
