"""The sweeper's side of a trial job: its limits as overrides, a batch launched through Hydra's
launcher, and each job's output as a plain outcome dict.

What a job runs is sweeper/launch/job.py; this module is what the engine, the search and the
verification rounds share to start jobs and read their endings.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from sweeper.launch import kinds
from sweeper.settings import SweepSettings
from sweeper.space.limits import (
    REAL_STEP_KEYS,
    limit_overrides,
    point_forecast,
    point_limits,
    race_run_forecast,
)
from sweeper.space.overrides import hydra_quote
from sweeper.space.point import Point
from sweeper.space.search_space import SearchSpace

log = logging.getLogger(__name__)

# the overrides of a race run's real full steps (sweeper/space/limits.py REAL_STEP_KEYS)
REAL_STEPS = tuple(f"{k}={v}" for k, v in REAL_STEP_KEYS.items())


def ready_point(
    space: SearchSpace, settings: SweepSettings, params: dict, *, race: bool = False
) -> tuple[Point, list[str]]:
    """The point of Optuna's `params` made ready to launch: the point with its trial's forecast
    attached, and its hard and stall limits as job overrides (sweeper/space/limits.py). `race`:
    the job runs real full steps (REAL_STEP_KEYS, which the point's knobs leave out) and the
    forecast and limits are those of such a run."""
    point = space.point(params)
    limits = point_limits(
        point.with_knobs(REAL_STEP_KEYS if race else {}),
        space.ctx,
        timeout_s=settings.budget.trial_timeout_s,
        stall_timeout_s=settings.budget.stall_timeout_s,
    )
    return point.with_forecast(limits.expected), limit_overrides(limits)


def real_trial_s(space: SearchSpace) -> float:
    """A verification run's predicted wall when the starting config's search trial is projected
    (verification measures real full steps, which a projected search trial's median wall
    underestimates); 0 otherwise, when the search trials' own median is the estimate."""
    if not point_forecast(Point(), space.ctx).projected:
        return 0.0
    return race_run_forecast(Point(), space.ctx).total_s


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


def job_name(number: int, *, repeat: int | None = None) -> str:
    """The name a job's folder is linked under in the sweep dir: its trial number, since Hydra
    numbers its jobs by its own counter (`trial-3`; a verification run `trial-3-verify-r2`)."""
    return f"trial-{number}" if repeat is None else f"trial-{number}-verify-r{repeat}"


def link_job(sweep_dir: Path, name: str, job_dir: Path) -> None:
    """`<sweep_dir>/<name>` -> `job_dir` (relative when inside the sweep dir), replacing an older
    link of that name (a later race of the same trial); a real folder of that name is left alone.
    A link that cannot be made (a filesystem without links) costs nothing but the link."""
    link = sweep_dir / name
    if link.exists() and not link.is_symlink():
        return
    try:
        target = job_dir.relative_to(sweep_dir)
    except ValueError:
        target = job_dir
    with contextlib.suppress(OSError):
        if link.is_symlink():
            if Path(os.readlink(link)) == target:
                return
            link.unlink()
        link.symlink_to(target, target_is_directory=True)


def pin_devices(job: list[str], slot: str) -> list[str]:
    """A job with its slot's CUDA_VISIBLE_DEVICES (Hydra sets it for the job's duration:
    `hydra.job.env_set`); an empty slot pins nothing."""
    if not slot:
        return job
    # ++: added, or replacing one the user set (env_set has no such key by default)
    return [*job, f"++hydra.job.env_set.CUDA_VISIBLE_DEVICES={hydra_quote(slot)}"]


class JobLauncher:
    """Hydra's launcher with the sweep's running job index (each job's number and folder) and
    the GPU slots its parallel jobs run on (sweeper/plan/gpu_slots.py; empty: nothing pinned).

    `launch_one` may be called from several threads at once when `parallel` (joblib, submitit:
    each job runs in a process of its own); the job numbers are handed out under a lock."""

    def __init__(
        self, launcher: Any, *, sweep_dir: Path | None = None, slots: list[str] | None = None
    ) -> None:
        self.launcher = launcher
        self.sweep_dir = sweep_dir
        self.job_idx = first_free_job(sweep_dir) if sweep_dir is not None else 0
        self.slots = list(slots or [])
        self.parallel = kinds.parallel(type(launcher).__name__)
        self._lock = threading.Lock()

    def _take_index(self, count: int) -> int:
        with self._lock:
            first, self.job_idx = self.job_idx, self.job_idx + count
        return first

    def launch(
        self, batch: list[list[str]], *, names: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Run jobs one after another (each on the first GPU slot); their outcomes, in order.
        Timed runs that must not share the machine (the race's rounds) go through here."""
        names = names or [None] * len(batch)  # type: ignore[list-item]
        return [self.launch_one(job, slot=0, name=n) for job, n in zip(batch, names, strict=True)]

    def launch_one(self, job: list[str], *, slot: int, name: str | None = None) -> dict[str, Any]:
        """Run one job on GPU slot `slot` (an index into `slots`) and return its outcome. `name`
        (`job_name`) links the job's folder by trial number, from its start (Hydra's folder is
        the job number under the default `hydra.sweep.subdir`) and, once it ran, to the folder
        the job reports."""
        pinned = pin_devices(job, self.slots[slot] if self.slots else "")
        idx = self._take_index(1)
        if name and self.sweep_dir is not None:
            link_job(self.sweep_dir, name, self.sweep_dir / str(idx))
            log.info("%s runs as Hydra job #%d", name, idx)  # the log file's key to '#<job> :'
        (ret,) = self.launcher.launch([pinned], initial_job_idx=idx)
        out = job_output(ret)
        if name and self.sweep_dir is not None and out.get("job_dir"):
            link_job(self.sweep_dir, name, Path(out["job_dir"]))
        return out

    def abort(self) -> None:
        """Stop the jobs running in other processes (Ctrl-C, SIGTERM): joblib's loky workers are
        killed, and every trial they started dies with them (its parent-death signal). The basic
        launcher's trials are this process's children (sweeper/launch/runner.kill_all_children).
        submitit's jobs are not stopped: a Slurm job runs on to its time limit unless cancelled
        (`scancel`); the study records its trial as interrupted and queues the point again."""
        if type(self.launcher).__name__ == "JoblibLauncher":
            from joblib.externals.loky import get_reusable_executor

            # reuse=True: the running executor as it is, never a new one
            get_reusable_executor(reuse=True).shutdown(wait=False, kill_workers=True)
