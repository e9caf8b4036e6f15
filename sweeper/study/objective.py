"""What a trial is scored on: its tokens/s, or the wall time the production run would take.

Pure arithmetic over a trial result (train/core/result.py `TrialResult`); no torch, no I/O.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from train.core.cost import TrainTime, train_time
from train.core.keys import CHECKPOINT_EVERY
from train.core.save_record import priced_stall_s

if TYPE_CHECKING:
    from train.core.result import TrialResult

log = logging.getLogger(__name__)

OBJECTIVES = ("tokens_per_s", "time_to_train")
_DIRECTIONS: dict[str, Literal["maximize", "minimize"]] = {
    "tokens_per_s": "maximize",
    "time_to_train": "minimize",
}
# An optional key in step_time_s: the median of the measured steps that carried no checkpoint
# save. The trial does not write it (it is not in train/core/result.py StepTimes); a result that
# carries it is scored on it, any other has it estimated from p50 (see steady_step_time_s).
NO_CHECKPOINT_P50_KEY = "p50_no_checkpoint"


@dataclass(kw_only=True)
class ObjectiveConfig:
    """The number a sweep optimizes."""

    name: str = "tokens_per_s"  # tokens_per_s (maximize) | time_to_train (minimize)
    planned_steps: int = 10_000  # optimizer steps of the production run (time_to_train only)
    planned_checkpoint_every: int = 0  # production save interval; 0 = each trial's own interval

    def __post_init__(self) -> None:
        if self.name not in OBJECTIVES:
            raise ValueError(f"objective.name must be one of {OBJECTIVES}, got {self.name!r}")
        if not isinstance(self.planned_steps, int) or self.planned_steps < 1:
            raise ValueError(
                f"objective.planned_steps must be a positive integer (steps of the production "
                f"run), got {self.planned_steps!r}"
            )
        if not isinstance(self.planned_checkpoint_every, int) or self.planned_checkpoint_every < 0:
            raise ValueError(
                f"objective.planned_checkpoint_every must be >= 0 (0 = use each trial's "
                f"checkpoint.every_steps), got {self.planned_checkpoint_every!r}"
            )


def searched_interval_warning(cfg: ObjectiveConfig, searched: set[str]) -> str | None:
    """A warning when time_to_train would price each trial's saves at its own searched interval:
    then the rarest interval wins by arithmetic, not by measurement."""
    if (
        cfg.name != "time_to_train"
        or cfg.planned_checkpoint_every
        or (CHECKPOINT_EVERY not in searched)
    ):
        return None
    return (
        "time_to_train prices each trial's saves at its own searched checkpoint.every_steps, "
        "which favours the rarest interval; set hydra.sweeper.cost.planned_checkpoint_every to the "
        "production run's interval"
    )


def direction(cfg: ObjectiveConfig) -> Literal["maximize", "minimize"]:
    """Optuna study direction for the objective."""
    return _DIRECTIONS[cfg.name]


def objective_value(result: TrialResult, cfg: ObjectiveConfig) -> float:
    """Score one trial result.

    tokens_per_s:  result["tokens_per_s"] (higher is better).
    time_to_train: predicted wall seconds of the production run (lower is better):

        compile charge (compile_charge_s: the graph's compile, the same for every trial of it)
        + planned_steps * steady_step_s
        + (planned_steps // interval) * save_stall_s

    steady_step_s is the median time of a step WITHOUT a checkpoint save (`steady_step_time_s`):
    measured step times include any save stall, so the raw p50 of a trial where most steps saved
    would count the stall twice. interval is `cfg.planned_checkpoint_every`, or, when that is 0,
    the trial's own config checkpoint.every_steps; interval 0 means no saves and no stall term.
    save_stall_s is the stall of one save at that interval (`save_stall_s`: the median save, or
    for async saves the snapshot plus what is left of the previous write at that interval).
    A missing compile counts as 0. An interval > 0 with no measured save (the trial window
    was shorter than its interval) cannot be priced: the stall term is 0 and a warning says so.
    """
    if cfg.name == "tokens_per_s":
        value = result.get("tokens_per_s")
        if value is None:
            raise ValueError(
                f"result has no tokens_per_s (status={result.get('status')!r}); only complete or "
                f"pruned trials can be scored"
            )
        return float(value)

    return result_train_time(result, cfg).total_s


def result_train_time(result: TrialResult, cfg: ObjectiveConfig) -> TrainTime:
    """The production run's wall time predicted from one trial result, split into steps, compile
    and checkpoint stalls: the time_to_train objective and the sweep's cost report
    (sweeper/report/time_to_train.py) both read it, through train.core.cost.train_time."""
    interval = cfg.planned_checkpoint_every or _trial_checkpoint_every(result)
    per_save = 0.0
    if interval > 0:
        measured = save_stall_s(result, planned_every=interval)
        if measured is not None:
            per_save = measured
        else:
            log.warning(
                "checkpoint interval %d but the trial measured no checkpoint save; "
                "time_to_train leaves checkpoint stalls out",
                interval,
            )
    return train_time(
        planned_steps=cfg.planned_steps,
        step_s=steady_step_time_s(result),
        compile_s=compile_charge_s(result),
        save_every=interval,
        save_stall_s=per_save,
    )


def compile_charge_s(result: TrialResult) -> float:
    """The compile the production run pays, once: the graph's compile as the sweep's record holds
    it (its first measurement, the same for every trial that compiles the graph: a trial whose
    graph came from the shared cache is not charged its lucky warm compile, nor one that compiled
    it cold the full price when another did not), else the trial's own compile_s (a result with
    no record: eager, or written before the shared cache). Missing = 0.
    """
    cache = (result.get("compile") or {}).get("cache") or {}
    charged = cache.get("graph_compile_s")
    if charged is not None:
        return float(charged)
    return float(result.get("compile_s") or 0.0)


def save_stall_s(result: TrialResult, *, planned_every: int) -> float | None:
    """Seconds one save blocks training when saves come every `planned_every` steps, from the
    stalls the trial measured (None when it measured none).

    sync: the caller writes the whole file every time, whatever the interval: the median save.
    async: the caller copies the state to host memory (the snapshot: the least stall seen, the
    first save's, with nothing in flight), but first waits for the previous write if it is still
    running (train/run/checkpoint.py). The trial saves every few steps to see saves inside a short
    window, so its later saves may wait; the write takes about that wait plus the steps between
    two saves, and at the planned interval only what the planned steps do not cover is waited:

        snapshot + max(0, median wait + trial_every x steady_step - planned_every x steady_step)

    (equal intervals give back the measured median). A trial whose window saved nothing under a
    sweep's save record prices its `checkpoint_save`, the target's save measured once
    (train/core/save_record.py `priced_stall_s`: the same rule from one save and its whole write).
    """
    saves = [float(s) for s in result.get("checkpoint_s") or []]
    if not saves:
        once = result.get("checkpoint_save")  # the target's save, measured once in the sweep
        if not once:
            return None
        return priced_stall_s(
            once, planned_every=planned_every, steady_step_s=steady_step_time_s(result)
        )
    mode = ((result.get("config") or {}).get("checkpoint") or {}).get("mode", "sync")
    if mode != "async":
        return statistics.median(saves)
    snapshot = min(saves)
    waits = [s - snapshot for s in saves[1:]]
    if not waits:  # one save: it waited on nothing, and nothing says how long its write took
        return snapshot
    steady_s = steady_step_time_s(result)
    write_s = statistics.median(waits) + _trial_checkpoint_every(result) * steady_s
    return snapshot + max(0.0, write_s - planned_every * steady_s)


def steady_step_time_s(result: TrialResult) -> float:
    """Median seconds of a measured step that did not save a checkpoint.

    Prefers step_time_s["p50_no_checkpoint"] when the result carries it. Otherwise p50 stands
    in: with k = len(checkpoint_s) saves among n measured steps, the k stalled steps are the
    slowest, so p50 (linear interpolation, train/core/meters.py percentile) ignores them while
    k < n/2; from there on it sits partly or wholly on a stalled step, and that share of the
    median stall is subtracted (e.g. checkpoint.every_steps=1: every step stalled, the whole
    median stall comes off).
    """
    stats = result.get("step_time_s") or {}
    no_ckpt = stats.get(NO_CHECKPOINT_P50_KEY)
    if no_ckpt is not None:
        return float(no_ckpt)
    p50 = stats.get("p50")
    if p50 is None:
        raise ValueError(
            f"result has no step_time_s.p50 (status={result.get('status')!r}); only complete or "
            f"pruned trials can be scored on time_to_train"
        )
    saves = [float(s) for s in result.get("checkpoint_s") or []]
    n_steps = int(stats.get("n") or 0)
    if not saves or n_steps < 1:
        return float(p50)
    share = _median_stalled_share(n_steps=n_steps, n_stalled=min(len(saves), n_steps))
    return max(float(p50) - share * statistics.median(saves), 0.0)


def _median_stalled_share(*, n_steps: int, n_stalled: int) -> float:
    """How much of an interpolated median of n sorted steps falls on the n_stalled slowest ones."""
    pos = (n_steps - 1) / 2
    lo, hi = math.floor(pos), math.ceil(pos)
    first_stalled = n_steps - n_stalled

    def stalled(i: int) -> float:
        return 1.0 if i >= first_stalled else 0.0

    return stalled(lo) + (stalled(hi) - stalled(lo)) * (pos - lo)


def _trial_checkpoint_every(result: TrialResult) -> int:
    """checkpoint.every_steps of the trial's resolved config (0 when absent)."""
    checkpoint = (result.get("config") or {}).get("checkpoint") or {}
    return int(checkpoint.get("every_steps") or 0)
