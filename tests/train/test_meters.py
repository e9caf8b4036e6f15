"""The step clocks and the projection arithmetic, with fake clocks and a fake CUDA event API.

The event clock is the CUDA path: no GPU here, so a fake stream clock stands in for the device
(`FakeGpu.now_ms` advances as fake kernels "run"), and the test checks what the trainer relies
on: no synchronize inside a step, one span per phase, elapsed times read only at take(), events
reused across steps.
"""

from __future__ import annotations

import pytest

from train.core.meters import (
    PHASES,
    EventPhaseClock,
    PhaseClock,
    micro_batch_times,
    percentile,
    project_step,
    summarize,
    time_fractions,
    window_rate,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_host_clock_charges_each_phase_its_wall_time() -> None:
    clock = FakeClock()
    pc = PhaseClock(clock=clock)
    with pc.phase("data_wait"):
        clock.t += 0.25
    with pc.phase("compute"):
        clock.t += 1.0
    pc.add("checkpoint", 0.5)
    assert pc.take() == {
        "compute": 1.0,
        "data_wait": 0.25,
        "optimizer": 0.0,
        "checkpoint": 0.5,
        "comms": 0.0,
    }
    assert pc.take() == dict.fromkeys(PHASES, 0.0)  # take() resets


class FakeGpu:
    """A stream's timeline in milliseconds; kernels advance it, events stamp it when recorded."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.created = 0
        self.synced = False

    def run(self, ms: float) -> None:
        self.now_ms += ms

    def event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.stamp: float | None = None

    def record(self) -> None:
        self.stamp = self.gpu.now_ms

    def elapsed_time(self, end: FakeEvent) -> float:
        if not self.gpu.synced:  # torch raises if an event has not completed
            raise RuntimeError("elapsed_time before the events completed (no synchronize)")
        assert self.stamp is not None and end.stamp is not None
        return end.stamp - self.stamp


def _fake_step(clock: EventPhaseClock, gpu: FakeGpu, *, micro: int) -> None:
    for _ in range(micro):
        with clock.phase("data_wait"):
            gpu.run(2.0)  # the consumer stream waits 2 ms for the batch copy
        with clock.phase("compute"):
            gpu.run(30.0)
    with clock.phase("optimizer"):
        gpu.run(5.0)


def test_event_clock_reads_device_time_after_the_steps_one_sync() -> None:
    gpu = FakeGpu()
    clock = EventPhaseClock(new_event=gpu.event)
    _fake_step(clock, gpu, micro=4)
    gpu.synced = True  # the trainer's finish_step: one synchronize, then take()
    totals = clock.take()
    assert totals == pytest.approx(
        {"compute": 0.120, "data_wait": 0.008, "optimizer": 0.005, "checkpoint": 0.0, "comms": 0.0}
    )


def test_event_clock_carves_the_exposed_all_reduce_and_pools_each_event_once() -> None:
    """A data-parallel micro-batch: 30 ms of backward, the last gradient ready (the comms
    mark's event), then 12 ms more until the all-reduce is done; the shared event is pooled once."""
    gpu = FakeGpu()
    clock = EventPhaseClock(new_event=gpu.event)
    for _ in range(2):
        with clock.phase("compute"):
            gpu.run(30.0)
            ready = clock.mark()
            gpu.run(12.0)
        clock.carve(ready, into="comms")
        gpu.synced = True
        totals = clock.take()
        gpu.synced = False
        assert (totals["compute"], totals["comms"]) == pytest.approx((0.030, 0.012))
    assert gpu.created == 3  # start, mark, end: reused in the second step, none twice


def test_event_clock_never_reads_an_event_before_the_sync() -> None:
    gpu = FakeGpu()
    clock = EventPhaseClock(new_event=gpu.event)
    _fake_step(clock, gpu, micro=2)  # recording alone must not read elapsed times
    with pytest.raises(RuntimeError, match="no synchronize"):
        clock.take()


def test_event_clock_reuses_its_events_and_adds_host_time() -> None:
    gpu = FakeGpu()
    clock = EventPhaseClock(new_event=gpu.event)
    gpu.synced = True
    for _ in range(5):
        _fake_step(clock, gpu, micro=3)
        clock.add("checkpoint", 0.75)  # a save's host-measured stall
        totals = clock.take()
        assert totals["checkpoint"] == 0.75
        assert totals["compute"] == pytest.approx(0.090)
    assert gpu.created == 2 * (3 + 3 + 1)  # one step's worth of events, recycled afterwards


P = {"compute": 0.8, "data_wait": 0.1, "optimizer": 0.05, "checkpoint": 0.0}


@pytest.mark.parametrize(
    ("wall", "phases", "micro", "accum", "step", "factor"),
    [
        # all micro-batches measured: the step as it was
        (1.0, P, [0.3, 0.3, 0.3], 3, 1.0, 1.0),
        # 4 of 32 alike: per-micro phases x8, optimizer and 0.05 s overhead once
        (1.0, P, [0.225] * 4, 32, 0.9 * 8 + 0.05 + 0.05, 8.0),
        # a cheap first micro-batch counts once, the rest 31 times
        (
            1.0,
            P,
            [0.15, 0.25, 0.25, 0.25],
            32,
            0.15 + 31 * 0.25 + 0.05 + 0.05,
            (0.15 + 31 * 0.25) / 0.9,
        ),
        # one micro-batch measured: plain scaling
        (0.5, {**P, "compute": 0.4, "data_wait": 0.0}, [0.4], 10, 4.0 + 0.05 + 0.05, 10.0),
        # a checkpoint stall stays once per step
        (
            3.0,
            {**P, "data_wait": 0.0, "optimizer": 0.2, "checkpoint": 2.0},
            [0.4, 0.4],
            16,
            0.8 * 8 + 0.2 + 2.0,
            8.0,
        ),
        # phases that overshoot the wall (clock granularity) leave no negative overhead
        (
            0.9,
            {**P, "compute": 0.9, "data_wait": 0.0, "optimizer": 0.01},
            [0.45, 0.45],
            4,
            1.8 + 0.01,
            2.0,
        ),
    ],
)
def test_project_step(wall, phases, micro, accum, step, factor) -> None:
    total, scaled = project_step(wall, phases, micro_s=micro, grad_accum=accum)
    assert total == pytest.approx(step)
    assert scaled["compute"] == pytest.approx(phases["compute"] * factor)
    assert scaled["data_wait"] == pytest.approx(phases["data_wait"] * factor)
    assert scaled["optimizer"] == phases["optimizer"]
    fracs = time_fractions([scaled], [total])
    assert sum(fracs.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("micro", [[], [0.1] * 5])
def test_project_step_needs_one_to_grad_accum_micro_batches(micro) -> None:
    with pytest.raises(ValueError, match=r"needs 1\.\.grad_accum=4"):
        project_step(1.0, P, micro_s=micro, grad_accum=4)


def test_micro_batch_times_pairs_each_compute_with_its_data_wait() -> None:
    spans = [
        ("data_wait", 0.1),
        ("compute", 1.0),
        ("data_wait", 0.2),
        ("compute", 2.0),
        ("optimizer", 0.5),
        ("checkpoint", 3.0),
    ]
    assert micro_batch_times(spans) == pytest.approx([1.1, 2.2])


def test_clocks_keep_the_steps_spans_in_order() -> None:
    clock = FakeClock()
    pc = PhaseClock(clock=clock)
    for seconds in (0.1, 0.2):
        with pc.phase("data_wait"):
            clock.t += seconds / 10
        with pc.phase("compute"):
            clock.t += seconds
    pc.take()
    assert micro_batch_times(pc.last_spans) == pytest.approx([0.11, 0.22])
    gpu = FakeGpu()
    ec = EventPhaseClock(new_event=gpu.event)
    _fake_step(ec, gpu, micro=3)
    gpu.synced = True
    ec.take()
    assert micro_batch_times(ec.last_spans) == pytest.approx([0.032] * 3)


# -- the statistics: exact numbers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([3.0], 50, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # interpolated between the middle two
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # order does not matter
        ([1.0, 2.0, 3.0, 4.0, 5.0], 90, 4.6),  # pos = 4 x 0.9 = 3.6
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 100, 5.0),
    ],
)
def test_percentile_interpolates_like_numpy(values, q, expected) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_summarize_a_window() -> None:
    stats = summarize([0.1, 0.2, 0.3, 0.4])
    assert stats == pytest.approx(
        {
            "p50": 0.25,
            "p90": 0.37,
            "mean": 0.25,
            "std": 0.12909944487358058,
            "cv": 0.5163977794943222,
            "min": 0.1,
            "max": 0.4,
            "n": 4,
        }
    )
    assert summarize([2.0])["std"] == 0.0  # one step: no spread, not a division by zero
    with pytest.raises(ValueError, match="no measured steps"):
        summarize([])


def test_fake_clocked_steps_give_exact_time_fractions() -> None:
    """Two steps timed on a fake host clock: 0.1 s data wait, 0.6 s compute, 0.2 s optimizer and
    0.1 s no phase claims (the sync, Python between phases) each; the second one also saves."""
    clock = FakeClock()
    pc = PhaseClock(clock=clock)
    totals, walls = [], []
    for save_s in (0.0, 0.5):
        start = clock()
        with pc.phase("data_wait"):
            clock.t += 0.1
        with pc.phase("compute"):
            clock.t += 0.6
        with pc.phase("optimizer"):
            clock.t += 0.2
        clock.t += 0.1 + save_s  # unclaimed time, and the save's stall
        pc.add("checkpoint", save_s)
        totals.append(pc.take())
        walls.append(clock() - start)
    assert walls == pytest.approx([1.0, 1.5])
    assert time_fractions(totals, walls) == pytest.approx(
        {
            "compute": 0.48,
            "data_wait": 0.08,
            "optimizer": 0.16,
            "checkpoint": 0.2,
            "comms": 0.0,
            "other": 0.08,
        }
    )
    assert window_rate(tokens=5_000, seconds=sum(walls)) == pytest.approx(2_000.0)
    assert window_rate(tokens=5_000, seconds=0.0) == 0.0


def test_time_fractions_rescale_an_overshoot_and_refuse_an_empty_window() -> None:
    phases = [{"compute": 0.9, "data_wait": 0.2, "optimizer": 0.0, "checkpoint": 0.0}]
    fracs = time_fractions(phases, [1.0])  # the phases claim 110% of the wall: clock granularity
    assert fracs == pytest.approx(
        {
            "compute": 0.9 / 1.1,
            "data_wait": 0.2 / 1.1,
            "optimizer": 0.0,
            "checkpoint": 0.0,
            "comms": 0.0,
            "other": 0.0,
        }
    )
    with pytest.raises(ValueError, match="must be positive"):
        time_fractions(phases, [0.0])
