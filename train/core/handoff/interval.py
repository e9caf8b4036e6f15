"""The production checkpoint interval, from the winner's measured save stall and the chance of
losing work (Young/Daly).

A save blocks training for C seconds; a failure loses the work since the last save, half an
interval on average. Young's first-order optimum (J. W. Young, "A first order approximation to the
optimum checkpoint interval", CACM 17(9), 1974; Daly, FGCS 22(3), 2006, refines it for C close to
M) balances the two:

    interval_s = sqrt(2 x C x M)        M: mean time between failures of the whole job

The job fails when any of its `world` devices does, so M = MTBF per device / world. The interval
is rounded to whole steps (at least 1) and bounded above by the user's planned interval
(hydra.sweeper.cost.planned_checkpoint_every, where set) and by the run's length. Pure arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0
# Default MTBF of ONE GPU, hours. Meta's Llama 3 paper ("The Llama 3 Herd of Models", 2024,
# section 3.3.4) reports 419 unexpected interruptions in a 54-day snapshot of pre-training on
# 16,384 H100 GPUs: 54 x 24 h x 16,384 / 419 = 50,677 GPU-hours per interruption. Rounded down
# (saves a little more often), and it counts every cause (GPU, HBM, host, network, software).
DEFAULT_MTBF_H = 50_000.0


def check_mtbf_h(mtbf_h: object) -> None:
    """hydra.sweeper.cost.mtbf_h is the MTBF of ONE device in hours, a number > 0."""
    if isinstance(mtbf_h, bool) or not isinstance(mtbf_h, int | float) or not mtbf_h > 0:
        raise ValueError(
            f"hydra.sweeper.cost.mtbf_h must be > 0 hours (mean time between failures of one "
            f"device; default {DEFAULT_MTBF_H:g} from Llama 3's 419 interruptions in 54 days on "
            f"16,384 GPUs), got {mtbf_h!r}"
        )


@dataclass(frozen=True, kw_only=True)
class CheckpointPlan:
    """A production checkpoint interval and what it costs."""

    every_steps: int  # checkpoint.every_steps for production
    rule: str  # which bound chose it: young-daly | planned_checkpoint_every | run length
    save_s: float  # measured stall of one save (C)
    step_s: float  # steady step time
    mtbf_h: float  # mean time between failures of the job (per device / world)
    optimum_s: float  # Young/Daly's interval, before rounding and bounds

    @property
    def interval_s(self) -> float:
        return self.every_steps * self.step_s

    @property
    def overhead_frac(self) -> float:
        """Saving's cost relative to the work between saves: C / interval."""
        return self.save_s / self.interval_s

    @property
    def lost_per_failure_s(self) -> float:
        """Expected work redone after a failure: half an interval."""
        return self.interval_s / 2

    def as_dict(self) -> dict[str, float | int | str]:
        """Flat, unit-named: best.yaml's provenance.checkpoint and the report read it."""
        return {
            "every_steps": self.every_steps,
            "rule": self.rule,
            "interval_s": self.interval_s,
            "save_s": self.save_s,
            "step_s": self.step_s,
            "mtbf_h": self.mtbf_h,
            "young_daly_s": self.optimum_s,
            "overhead_frac": self.overhead_frac,
            "lost_per_failure_s": self.lost_per_failure_s,
        }


def young_daly_s(*, save_s: float, mtbf_s: float) -> float:
    """Young's optimum seconds of work between saves: sqrt(2 x save cost x MTBF)."""
    if not (save_s >= 0 and mtbf_s > 0):
        raise ValueError(f"save_s must be >= 0 and mtbf_s > 0, got {save_s!r} and {mtbf_s!r}")
    return math.sqrt(2 * save_s * mtbf_s)


def checkpoint_plan(
    *,
    save_s: float,
    step_s: float,
    mtbf_h: float = DEFAULT_MTBF_H,
    world: int = 1,
    planned_every: int = 0,
    planned_steps: int = 0,
) -> CheckpointPlan:
    """The interval in steps: round(Young/Daly / step_s), at least 1, at most `planned_every`
    (> 0: the user's) and `planned_steps` (> 0: the run's length)."""
    if not step_s > 0:
        raise ValueError(f"step_s must be > 0 seconds, got {step_s!r}")
    check_mtbf_h(mtbf_h)
    if world < 1 or planned_every < 0 or planned_steps < 0:
        raise ValueError(
            f"world must be >= 1, planned_every and planned_steps >= 0, got "
            f"{world}, {planned_every}, {planned_steps}"
        )
    job_mtbf_h = mtbf_h / world
    optimum = young_daly_s(save_s=save_s, mtbf_s=job_mtbf_h * SECONDS_PER_HOUR)
    steps, rule = max(1, round(optimum / step_s)), "young-daly"
    if planned_every and steps > planned_every:
        steps, rule = planned_every, "planned_checkpoint_every"
    if planned_steps and steps > planned_steps:
        steps, rule = planned_steps, "run length"
    return CheckpointPlan(
        every_steps=steps,
        rule=rule,
        save_s=save_s,
        step_s=step_s,
        mtbf_h=job_mtbf_h,
        optimum_s=optimum,
    )


def plan_line(plan: CheckpointPlan) -> str:
    """The report's line: the interval, the expected overhead and the work lost per failure."""
    bound = {
        "young-daly": "Young/Daly",
        "planned_checkpoint_every": "capped by hydra.sweeper.cost.planned_checkpoint_every",
        "run length": "capped at the run's length",
    }[plan.rule]
    return (
        f"checkpoint every {plan.every_steps:,} steps ({_dur(plan.interval_s)}; {bound}: "
        f"sqrt(2 x {plan.save_s:.3g} s save x {plan.mtbf_h:,.0f} h MTBF) = "
        f"{_dur(plan.optimum_s)}): saving costs {100 * plan.overhead_frac:.3f}% of the run, a "
        f"failure loses {_dur(plan.lost_per_failure_s)} of work on average"
    )


def _dur(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:,.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"
