"""The sweep's remaining time, learned from what this study measured, race included.

The plan's figures are predictions from an assumed MFU; once trials ran, their walls are the
better guess. What is left: the trials the budget still allows at the median trial's wall, and
the race that verifies the finalists (sweeper/verify/race_rules.py): the top k and the starting
config, `verify.repeats` rounds each, then up to `verify.max_rounds` with the leader and one
challenger left. A race run measures real full steps to the end, like a complete search trial,
so it is priced at the complete trials' median wall (pruned trials stop early and would make the
race look short); where the search trials were projected from short steps, a race run is longer
than any of them, and its predicted wall is scaled by how far the measured trials were off their
prediction. Under a wall budget the sweep stops near the budget, but the race's first round always
runs. Pure: tests/sweeper/test_eta.py tables it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from sweeper.numbers import fmt_duration


@dataclass(frozen=True, kw_only=True)
class Eta:
    """The remaining time and what it is made of."""

    total_s: float | None  # None before any trial measured a wall
    trials_left: int
    trial_s: float | None  # the median search trial's wall
    race_runs: int
    run_s: float | None  # one race run's wall: a complete trial's median
    capped: bool  # the wall budget ends the sweep first

    def text(self) -> str:
        """`eta 2m10s (10 trials x 6.9 s + race ~14 runs x 7.3 s)`, or `eta -` before a wall."""
        if self.total_s is None:
            return "eta -"
        parts = []
        if self.trials_left and self.trial_s is not None:
            parts.append(f"{self.trials_left} trial(s) x {self.trial_s:.1f} s")
        if self.race_runs and self.run_s is not None:
            parts.append(f"race ~{self.race_runs} runs x {self.run_s:.1f} s")
        how = " + ".join(parts)
        if self.capped:
            how = f"{how}; the wall budget ends it first" if how else "the wall budget"
        return f"eta {fmt_duration(self.total_s)}" + (f" ({how})" if how else "")


def race_runs(*, contenders: int, repeats: int, max_rounds: int) -> int:
    """Runs of a race of `contenders`: `repeats` rounds of all, then rounds of two (the leader and
    its closest challenger) up to `max_rounds` (0: the race stops after `repeats`)."""
    if contenders <= 0:
        return 0
    extra = max(0, max_rounds - repeats)
    return contenders * repeats + min(2, contenders) * extra


def estimate(
    *,
    trials_left: int,
    trial_walls: list[float],
    complete_walls: list[float],
    contenders: int,
    repeats: int,
    max_rounds: int,
    wall_left_s: float | None,
    predicted_trial_s: float | None = None,
    predicted_run_s: float = 0.0,
) -> Eta:
    """What is left of the sweep: `trials_left` search trials at the median of `trial_walls`, the
    race at the median of `complete_walls` (else of `trial_walls`) or, when longer, at
    `predicted_run_s` (a real-steps run where search trials are projected; 0: none) times the
    measured / `predicted_trial_s` ratio; capped by `wall_left_s` (but never below one race round,
    which always runs)."""
    trial_s = statistics.median(trial_walls) if trial_walls else None
    run_s = statistics.median(complete_walls) if complete_walls else trial_s
    if run_s is not None and trial_s is not None and predicted_run_s > 0:
        ratio = trial_s / predicted_trial_s if predicted_trial_s else 1.0
        run_s = max(run_s, predicted_run_s * ratio)
    runs = race_runs(contenders=contenders, repeats=repeats, max_rounds=max_rounds)
    if trial_s is None or run_s is None:
        return Eta(
            total_s=wall_left_s,
            trials_left=trials_left,
            trial_s=trial_s,
            race_runs=runs,
            run_s=run_s,
            capped=wall_left_s is not None,
        )
    total = trials_left * trial_s + runs * run_s
    capped = False
    if wall_left_s is not None:
        floor = min(total, contenders * run_s)  # the race's first round runs whatever the budget
        if max(wall_left_s, floor) < total:
            total, capped = max(wall_left_s, floor), True
    return Eta(
        total_s=total,
        trials_left=trials_left,
        trial_s=trial_s,
        race_runs=runs,
        run_s=run_s,
        capped=capped,
    )
