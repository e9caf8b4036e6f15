"""The warm-up and the measured window of one trial: `measure`, told as its steps.

Warm-up steps first, short ones (compilation and allocator growth happen there and are timed
apart); the last sizes a full step, which decides whether the window measures full steps or short
ones projected to full ones. The window then runs until `trial.max_steps`, or `trial.max_seconds`
past `trial.min_steps`, or the step time's confidence interval is within `trial.target_ci`
(train/core/window_ci.py), or a prune; `train/trial/measurement.py` runs the trial around it and
`train/core/result.py` turns what it returns into the result JSON.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from train import device as dev
from train.core.hooks import hooks_of
from train.core.meters import (
    EventPhaseClock,
    PhaseClock,
    micro_batch_times,
    project_step,
    projects,
    short_step,
    summarize,
    time_fractions,
    window_rate,
)
from train.core.progress import Heartbeat, ProgressFile
from train.core.pruning import Reporter
from train.core.result import Interval
from train.core.result_build import Measurement
from train.core.schedule import scheduled_lr
from train.core.window_ci import ci_reached, first_ci_step, relative_half_width
from train.measure import compile_stats
from train.measure.compile_stats import CompileSnapshot
from train.measure.nvml import NvmlSampler
from train.run.distributed import any_rank, from_main
from train.run.loop import Session, check_finite, make_phase_clock, run_step
from train.trial.failure import plant_fault

# the trial's logger: the projection and prune lines read as they always have
log = logging.getLogger("train.trial.measurement")
Clock = PhaseClock | EventPhaseClock


@dataclass(kw_only=True)
class _WarmUp:
    """What the warm-up leaves: its time, its losses, and its last step to size a full one from."""

    seconds: float
    compile: dict[str, float | int]  # compile_stats.delta over the warm-up
    compile_after: CompileSnapshot  # where the window's count starts
    first_loss: float  # nan without warm-up steps
    losses: list[float]  # every warm-up step's mean loss over the global batch
    lrs: list[float]  # the lr each warm-up step trained at (train/core/schedule.py scheduled_lr)
    last_wall_s: float  # the last step's wall time and phases, as run_step measured them
    last_phases: dict[str, float]


@dataclass(kw_only=True)
class _Window:
    """The measured window as it runs: one entry per optimizer step."""

    projected: bool  # short steps measured, full ones projected from them
    grad_accum: int
    last_loss: float
    step_times: list[float] = field(default_factory=list)  # full steps: measured, or projected
    short_times: list[float] = field(default_factory=list)  # the short steps projected from
    phases: list[dict[str, float]] = field(default_factory=list)
    checkpoint_s: list[float] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    pruned: bool = False
    # why the window ended: max_steps | max_seconds | target_ci | pruned
    stopped_by: str = "max_steps"

    def add_step(self, wall_s: float, phases: dict[str, float], clock: Clock) -> None:
        """Record one step's time and phases (a short step projected to the full one first)."""
        if self.projected:
            self.short_times.append(wall_s)
            wall_s, phases = project_step(
                wall_s,
                phases,
                micro_s=micro_batch_times(clock.last_spans),
                grad_accum=self.grad_accum,
            )
        self.step_times.append(wall_s)
        self.phases.append(phases)

    def interval(self, *, step: int, every: int, tokens_per_step: int) -> Interval:
        """The interval of the last `every` steps, ending at measured step `step`."""
        recent = self.step_times[-every:]
        fracs = time_fractions(self.phases[-every:], recent)
        interval: Interval = {
            "step": step,
            "tokens_per_s": window_rate(tokens_per_step * len(recent), sum(recent)),
            "step_time_s": sorted(recent)[len(recent) // 2],
            "data_wait_frac": fracs["data_wait"],
        }
        self.intervals.append(interval)
        return interval


def measure(
    s: Session,
    *,
    reporter: Reporter | None,
    progress: ProgressFile,
    heartbeat: Heartbeat | None = None,
    saves: bool = True,
) -> Measurement:
    """Warm up, then measure. Returns the raw measurements that `build_result` turns into the JSON.

    Every step is `run_step`'s: the step, its checkpoint save when one is due, one synchronize,
    then the phase times (CUDA events on a GPU), exactly as in the production run. Warm-up steps
    are short (at most `trial.project_micro_steps` micro-batches: compile and allocator growth do
    not depend on the accumulation count); the last one sizes a full step. When a full step would
    take longer than `trial.project_above_s`, the window measures short steps too and projects
    each to the full step (`project_step`): grad_accum x the measured micro-batch phases + the
    step's optimizer, checkpoint and overhead, once. `saves` False: the window never saves (the
    save is measured once per sweep and target instead: train/trial/save_price.py).
    """
    t, accum = s.cfg.trial, s.cfg.batch.grad_accum
    short = short_step(accum, t.project_micro_steps)
    clock = make_phase_clock(s.device)
    heartbeat = heartbeat or Heartbeat(progress, interval_s=0)  # not started: phase lines only

    # -- warm-up: compile, autotune, allocator growth; timed, never part of the measured numbers
    heartbeat.phase("warmup")
    warm = _warm_up(s, clock, micro_batches=short)
    full_estimate_s = _full_step_estimate(s, warm, clock)
    projected = projects(
        grad_accum=accum,
        project_micro_steps=t.project_micro_steps,
        above_s=t.project_above_s,
        full_step_s=full_estimate_s,
    )
    micro = short if projected else accum
    heartbeat.stop()
    _announce_window(
        progress,
        warm,
        full_estimate_s=full_estimate_s,
        micro=micro,
        accum=accum,
        above_s=t.project_above_s,
        projected=projected,
    )
    dev.reset_peak_memory(s.device)

    # -- measured window
    window = _Window(projected=projected, grad_accum=accum, last_loss=warm.first_loss)
    sampler = NvmlSampler(device_index=s.device.index or 0) if s.device.type == "cuda" else None
    with sampler if sampler is not None else nullcontext():
        _run_window(
            s, window, clock=clock, micro=micro, reporter=reporter, progress=progress, saves=saves
        )
    window_compile = compile_stats.delta(warm.compile_after, compile_stats.snapshot())
    s.checkpointer.wait()
    return _measurement(
        warm,
        window,
        window_compile=window_compile,
        device_samples=sampler.summary() if sampler is not None else None,
        checkpoint_bytes=getattr(s.checkpointer, "bytes_written", None),
        micro=micro,
        full_estimate_s=full_estimate_s,
    )


def _measurement(
    warm: _WarmUp,
    window: _Window,
    *,
    window_compile: dict[str, float | int],
    device_samples: dict[str, Any] | None,
    checkpoint_bytes: int | None,
    micro: int,
    full_estimate_s: float,
) -> Measurement:
    """The raw measurements of the warm-up and the window, as `build_result` reads them."""
    return {
        "step_times": window.step_times,
        "phases": window.phases,
        "checkpoint_s": window.checkpoint_s,
        "intervals": window.intervals,
        "warmup_s": warm.seconds,
        "warmup_compile": warm.compile,
        "window_compile": window_compile,
        "loss_first": warm.first_loss,
        "loss_last": window.last_loss,
        "losses": warm.losses + window.losses,
        "lrs": warm.lrs + window.lrs,
        "pruned": window.pruned,
        "window_stop": {
            "by": window.stopped_by,
            "steps": len(window.step_times),
            "ci": relative_half_width(window.step_times),
        },
        "device_samples": device_samples,
        "checkpoint_bytes": checkpoint_bytes,
        "projection": {
            "micro_batches_per_step": micro,
            "grad_accum": window.grad_accum,
            "short_step_s": summarize(window.short_times),
        }
        if window.projected
        else None,
        "full_step_estimate_s": full_estimate_s,
    }


def _warm_up(s: Session, clock: Clock, *, micro_batches: int) -> _WarmUp:
    """`trial.warmup_steps` short steps of `micro_batches`, each loss checked finite."""
    before = compile_stats.snapshot()
    warm_start = time.perf_counter()
    first_loss = float("nan")
    losses: list[float] = []
    lrs: list[float] = []
    wall_s, phases = 0.0, clock.take()
    for i in range(s.cfg.trial.warmup_steps):
        step_start = time.perf_counter()
        lrs.append(scheduled_lr(s.cfg, i))
        loss_t, phases, _ = run_step(s, lr=lrs[-1], clock=clock, micro_batches=micro_batches)
        wall_s = time.perf_counter() - step_start
        loss = loss_t.item()
        losses.append(loss)
        check_finite(loss, i)
        if i == 0:
            first_loss = loss
    seconds = time.perf_counter() - warm_start
    after = compile_stats.snapshot()
    return _WarmUp(
        seconds=seconds,
        compile=compile_stats.delta(before, after),
        compile_after=after,
        first_loss=first_loss,
        losses=losses,
        lrs=lrs,
        last_wall_s=wall_s,
        last_phases=phases,
    )


def _full_step_estimate(s: Session, warm: _WarmUp, clock: Clock) -> float:
    """A full step's seconds, projected from the last warm-up step: rank 0's figure on every rank.

    Ranks decide from rank 0's clock: a projected window on one rank and full steps on another
    would wait on each other's all-reduces forever."""
    full_s, _ = project_step(
        warm.last_wall_s,
        warm.last_phases,
        micro_s=micro_batch_times(clock.last_spans),
        grad_accum=s.cfg.batch.grad_accum,
    )
    return from_main(full_s, s.rank, s.device)


def _announce_window(
    progress: ProgressFile,
    warm: _WarmUp,
    *,
    full_estimate_s: float,
    micro: int,
    accum: int,
    above_s: float,
    projected: bool,
) -> None:
    """The warm-up's end in the progress file; the log says when the window will project."""
    progress.write(
        event="warmup_done",
        warmup_s=warm.seconds,
        full_step_estimate_s=full_estimate_s,
        projected=projected,
    )
    if projected:
        log.info(
            "a full step (%d micro-batches) would take ~%.1f s > trial.project_above_s=%g: "
            "measuring steps of %d micro-batches and projecting",
            accum,
            full_estimate_s,
            above_s,
            micro,
        )


def _run_window(
    s: Session,
    window: _Window,
    *,
    clock: Clock,
    micro: int,
    reporter: Reporter | None,
    progress: ProgressFile,
    saves: bool = True,
) -> None:
    """Measured steps until `trial.max_steps`, or `trial.max_seconds` past `trial.min_steps`, or
    the mean step time known to +-`trial.target_ci` (from the first step `first_ci_step` allows),
    or a prune. The step clock covers training only: reporting and the ranks' agreement are not.
    Prune reports carry the measured step index, so trials are compared at equal measured steps
    whichever rule ends each window."""
    t = s.cfg.trial
    hooks = hooks_of(s.cfg)  # a test's planted fault (train/core/hooks.py)
    ci_from = first_ci_step(
        ci_min_steps=t.ci_min_steps,
        max_steps=t.max_steps,
        checkpoint_every=s.cfg.checkpoint.every_steps if saves else 0,
    )
    window_start = time.perf_counter()
    prev = window_start
    while len(window.step_times) < t.max_steps:
        step = len(window.step_times) + 1
        if step == 1 and hooks.fault != "none" and s.rank.rank == hooks.fault_rank % s.rank.world:
            plant_fault(hooks.fault, s)
        window.lrs.append(scheduled_lr(s.cfg, t.warmup_steps + step - 1))
        loss_t, phases, stall = run_step(
            s,
            lr=window.lrs[-1],
            clock=clock,
            micro_batches=micro,
            checkpoint_step=step if saves and s.checkpointer.due(step) else None,
        )
        if stall is not None:
            window.checkpoint_s.append(stall)
        now = time.perf_counter()
        window.add_step(now - prev, phases, clock)
        prev = now
        window.last_loss = loss_t.item()
        window.losses.append(window.last_loss)
        check_finite(window.last_loss, t.warmup_steps + step)
        if step % t.report_every == 0:
            report_start = time.perf_counter()
            if _report_interval(s, window, step=step, reporter=reporter, progress=progress):
                window.pruned, window.stopped_by = True, "pruned"
                break
            # reporting to the study (a database round trip) is the sweep's bookkeeping, not
            # training: the next step's clock starts after it
            prev += time.perf_counter() - report_start
        agree_start = time.perf_counter()
        timed_out = now - window_start >= t.max_seconds and step >= t.min_steps
        measured = ci_reached(window.step_times, target_ci=t.target_ci, first_step=ci_from)
        if any_rank(timed_out or measured, s.rank, s.device):
            if step < t.max_steps:
                window.stopped_by = "max_seconds" if timed_out else "target_ci"
            if window.stopped_by == "target_ci":
                log.info(
                    "mean step time known to +-%.1f%% after %d measured steps "
                    "(trial.target_ci=%g): window ends",
                    100 * relative_half_width(window.step_times),
                    step,
                    t.target_ci,
                )
            break
        prev += time.perf_counter() - agree_start  # the ranks' agreement is not training


def _report_interval(
    s: Session, window: _Window, *, step: int, reporter: Reporter | None, progress: ProgressFile
) -> bool:
    """Write the interval ending at `step` and report the running rate to the study; whether any
    rank's pruner stops the trial here."""
    interval = window.interval(
        step=step, every=s.cfg.trial.report_every, tokens_per_step=s.tokens_per_step
    )
    running = window_rate(s.tokens_per_step * step, sum(window.step_times))
    progress.write(event="interval", running_tokens_per_s=running, **interval)
    prune = reporter is not None and reporter.report(step=step, value=running)
    if any_rank(prune, s.rank, s.device):
        log.info("pruned at measured step %d (running %.0f tokens/s)", step, running)
        return True
    return False
