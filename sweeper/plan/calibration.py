"""What earlier sweeps on this machine measured, for the plan: the arithmetic's guesses replaced by
this machine's own figures.

The plan's trial times are arithmetic (sweeper/space/limits.py), sized to err long: on a CPU there
is no datasheet peak, so a step is priced at a conservative 10 GFLOP/s, and a pruned trial or a
race that decides early is not foreseen. A sweep that ran here already measured what those cost.
Each sweep notes where it ran (`PLAN_KEY_ATTR`: model, search and device) and when it started;
plan mode, planning for this machine, reads the finished sweeps of the same key from the same
storage and takes, over them:

    search trial  the mean wall of a search trial process (pruned and early-stopped ones included)
    race          the mean number of race runs per sweep, and the mean wall of one
    between       the seconds between trial processes (study, MLflow, launch): the span from the
                  sweep's start to its last race run, less the trial processes inside it

so the predicted wall is the same sum as the uncalibrated one (start and end, the search, the
race) with measured terms. Reads the storage; writes nothing.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from train.core.evidence import RACE_ATTR
from train.core.result import RESULT_NAME

log = logging.getLogger(__name__)

PLAN_KEY_ATTR = "plan_key"  # study user attr: "<model>|<search>|<device name>"
STARTED_ATTR = "sweep_started_at"  # study user attr: the sweep's start, seconds since the epoch


def plan_key(*, model: str, search: str, device: str) -> str:
    return f"{model}|{search}|{device}"


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Means over `sweeps` finished sweeps of one plan key."""

    sweeps: int
    trial_s: float  # a search trial process's wall
    race_runs: float  # race runs per sweep
    race_run_s: float  # one race run's wall
    between_s: float  # per trial process: the sweep's own work between processes
    guard_s: float = 0.0  # from the search's last trial to the race's first run (the guard's runs)


@dataclass(frozen=True, kw_only=True)
class SweepRecord:
    """One finished sweep's measurements."""

    trial_walls: list[float]
    race_walls: list[float]
    span_s: float | None  # from the sweep's start to its last race run's end
    guard_s: float = 0.0  # from the search's last trial to the race's first run


def calibrate(records: list[SweepRecord]) -> Calibration | None:
    """The means over finished sweeps (None without one that searched and raced). Pure."""
    done = [r for r in records if r.trial_walls and r.race_walls]
    if not done:
        return None
    gaps = []
    for r in done:
        if r.span_s is not None:
            n = len(r.trial_walls) + len(r.race_walls)
            rest = r.span_s - sum(r.trial_walls) - sum(r.race_walls) - r.guard_s
            gaps.append(max(0.0, rest) / n)
    return Calibration(
        sweeps=len(done),
        trial_s=statistics.fmean(w for r in done for w in r.trial_walls),
        race_runs=statistics.fmean(len(r.race_walls) for r in done),
        race_run_s=statistics.fmean(w for r in done for w in r.race_walls),
        between_s=statistics.fmean(gaps) if gaps else 0.0,
        guard_s=statistics.fmean(r.guard_s for r in done),
    )


def sweep_record(study: Any) -> SweepRecord | None:
    """A finished sweep's record from its study (None while it has no race)."""
    race = study.user_attrs.get(RACE_ATTR) or {}
    ends, starts, race_walls = [], [], []
    for stored in race.get("rounds", []):
        for run in stored.values():
            result = Path(run["job_dir"]) / RESULT_NAME if run and run.get("job_dir") else None
            wall = _result_wall(result)
            if wall is not None:
                race_walls.append(wall)
                ends.append(result.stat().st_mtime)  # type: ignore[union-attr]
                starts.append(ends[-1] - wall)
    if not race_walls:
        return None
    trials = [t for t in study.get_trials(deepcopy=False) if "wall_s" in t.user_attrs]
    started = study.user_attrs.get(STARTED_ATTR)
    span = max(ends) - float(started) if started is not None and ends else None
    done = [t.datetime_complete.timestamp() for t in trials if t.datetime_complete]
    guard = max(0.0, min(starts) - max(done)) if done else 0.0
    return SweepRecord(
        trial_walls=[float(t.user_attrs["wall_s"]) for t in trials],
        race_walls=race_walls,
        span_s=span,
        guard_s=guard,
    )


def _result_wall(path: Path | None) -> float | None:
    import json

    try:
        return float(json.loads(path.read_text())["wall_s"]) if path else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_calibration(storage: str, key: str) -> Calibration | None:
    """The calibration from the finished sweeps of plan key `key` in `storage`; None when there
    is none (or the storage cannot be read: the plan then stays arithmetic)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        summaries = optuna.get_all_study_summaries(storage=storage, include_best_trial=False)
        records = []
        for s in summaries:
            if s.user_attrs.get(PLAN_KEY_ATTR) != key:
                continue
            record = sweep_record(optuna.load_study(study_name=s.study_name, storage=storage))
            if record is not None:
                records.append(record)
    except Exception as exc:  # any storage error: no calibration, never a failed plan
        log.info("no calibration from %s (%s)", storage, exc)
        return None
    return calibrate(records)
