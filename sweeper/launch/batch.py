"""The sweeper's side of a trial job: its limits as overrides, a batch launched through Hydra's
launcher, and each job's output as a plain outcome dict.

What a job runs is sweeper/launch/job.py; this module is what the engine, the search and the
verification rounds share to start jobs and read their endings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from sweeper.limits import TrialTime, limit_overrides
from sweeper.scan import point_limits
from sweeper.settings import SweepSettings
from sweeper.space import SearchSpace

# Verification measures real full optimizer steps: a projection (train/trial/measurement.py) is a
# search shortcut, never what a winner is exported on.
REAL_STEP_KEYS = (("trial.project_above_s", 0),)
REAL_STEPS = tuple(f"{k}={v}" for k, v in REAL_STEP_KEYS)


def trial_limits(
    space: SearchSpace, settings: SweepSettings, params: dict, extra: dict | None = None
) -> list[str]:
    """The trial's hard and stall limits as job overrides (sweeper/limits.py); `extra` are
    trainer keys the job sets besides the point's (verification's real full steps)."""
    limits = point_limits(
        {**space.point(params), **(extra or {})},
        space.ctx,
        timeout_s=settings.trial_timeout_s,
        stall_timeout_s=settings.stall_timeout_s,
    )
    return limit_overrides(limits)


def real_trial_s(space: SearchSpace, settings: SweepSettings) -> float:
    """A verification run's predicted wall when the starting config's search trial is projected
    (verification measures real full steps, which a projected search trial's median wall
    underestimates); 0 otherwise, when the search trials' own median is the estimate."""

    def expected(extra: dict) -> TrialTime:
        return point_limits(
            extra, space.ctx, timeout_s=settings.trial_timeout_s,
            stall_timeout_s=settings.stall_timeout_s,
        ).expected  # fmt: skip

    return expected(dict(REAL_STEP_KEYS)).total_s if expected({}).projected else 0.0


def job_output(ret: JobReturn) -> dict[str, Any]:
    """A job's outcome dict (state, reason, result, wall_s, job_dir); a job that raised is a
    crash whose reason names the exception."""
    if ret.status == JobStatus.COMPLETED:
        return ret.return_value
    err = ret._return_value  # the exception the job raised (Hydra keeps it there)
    return {"state": "crash", "reason": f"job failed: {err!r}", "result": None, "wall_s": None}


def first_free_job(sweep_dir: Path) -> int:
    """The first job number with no folder in `sweep_dir`: a sweep resumed into its original folder
    numbers its jobs after the ones already there, never over them."""
    taken = [int(p.name) for p in sweep_dir.glob("*") if p.is_dir() and p.name.isdigit()]
    return max(taken, default=-1) + 1


class JobLauncher:
    """Hydra's launcher with the sweep's running job index (each job's number and folder)."""

    def __init__(self, launcher: Any, *, sweep_dir: Path | None = None) -> None:
        self.launcher = launcher
        self.job_idx = first_free_job(sweep_dir) if sweep_dir is not None else 0

    def launch(self, batch: list[list[str]]) -> list[dict[str, Any]]:
        """Run one batch of jobs (one list of overrides each); their outcomes, in order."""
        returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
        self.job_idx += len(batch)
        return [job_output(ret) for ret in returns]
