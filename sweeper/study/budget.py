"""The sweep's budget: trials left, wall time left, the verification reserve, the ETA and the
failure-rate stop.

Two limits end a search: `n_trials` finished trials (excluded points and duplicates ran nothing and
cost none, except in a grid, whose budget is its list of points) and the wall budget `max_wall_s`,
which includes verification, so the search stops early enough to leave room for it. The clock is
injectable, so the arithmetic is tested with a fake one (tests/sweeper/test_budget.py).

A budget explains itself: one that cannot hold a single predicted trial is refused before the
study opens (`wall_budget_error`), and the search's end names the budget that ended it, what it
allowed and what one trial took and was predicted to take (`Budget.end_line`).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from sweeper.settings import SweepSettings
from sweeper.study.eta import Eta, estimate
from sweeper.study.optuna_study import (
    LISTED_SAMPLERS,
    count_finished,
    own_outcomes,
    running_trials,
)

log = logging.getLogger(__name__)

VERIFY_SHARE = 0.35  # at most this share of a wall budget is held back for verification
GUARD_SHARE = 0.25  # and at most this share besides for the numerics guard's curve runs
UNLIMITED = 10**9  # trials left when n_trials is 0
WALL = "wall"  # the wall budget ended the search
TRIALS = "trials"  # the trial budget ended it


def verify_reserve(*, run_s: float, top_k: int, repeats: int, max_wall_s: float) -> float:
    """The room a search keeps for verification: `repeats` rounds of the top k and the starting
    config at `run_s` each, never more than VERIFY_SHARE of a wall budget (0: none)."""
    reserve = run_s * (top_k + 1) * repeats
    return min(reserve, VERIFY_SHARE * max_wall_s) if max_wall_s > 0 else reserve


def wall_budget_error(
    *, max_wall_s: float, setting: str, quickest_s: float | None, overhead_s: float
) -> str | None:
    """Why a wall budget cannot hold one trial (None when it can, or there is none): the quickest
    runnable point is predicted to take longer than the whole budget. A sweep that fits one trial
    and its verification run needs `overhead_s` (start and end) + 2 x the quickest trial."""
    if max_wall_s <= 0 or quickest_s is None or max_wall_s >= quickest_s:
        return None
    need = overhead_s + 2 * quickest_s
    return (
        f"hydra.sweeper.{setting}={max_wall_s:g} s cannot hold one trial: the quickest point of "
        f"the space is predicted to take {quickest_s:.1f} s (set-up included), and the budget "
        f"also pays for verification; set hydra.sweeper.budget.max_wall_s to at least {need:.0f} s "
        f"(one trial and its verification run), or hydra.sweeper.{setting}=0 for none"
    )


def trials_spent(study: optuna.Study, *, listed: bool) -> int:
    """Trials charged to n_trials: excluded points ran nothing and cost none, except in a grid or
    under the prior sampler (`listed`: LISTED_SAMPLERS), whose budget is its list of points."""
    done = count_finished(study)
    if listed:
        return done
    excluded = sum(t.user_attrs.get("failure_kind") == "excluded" for t in own_outcomes(study))
    return done - excluded


def resume_line(study: optuna.Study, settings: SweepSettings) -> str | None:
    """What the search of a study that already holds trials does next, in one line (None for a
    new study). Only the trial budget carries over: a wall budget is this run's, so a study whose
    search a wall budget ended searches on until its n_trials are spent."""
    spent = trials_spent(study, listed=settings.sampler in LISTED_SAMPLERS)
    if spent == 0:
        return None
    n = settings.n_trials
    if n <= 0:
        return (
            f"the study holds {spent} trial(s) and has no trial budget "
            f"(hydra.sweeper.n_trials=0): it searches on until this run's wall budget ends"
        )
    if spent >= n:
        return (
            f"the study holds {spent} trial(s), its hydra.sweeper.n_trials={n} spent: no "
            f"search, straight to verification; raise hydra.sweeper.n_trials to search more"
        )
    return (
        f"the study holds {spent} of its {n} trial(s) (hydra.sweeper.n_trials={n}): it "
        f"searches up to {n - spent} more before verification (a wall budget ended the last "
        f"search, or it was stopped); hydra.sweeper.n_trials={spent} goes straight to "
        f"verification"
    )


@dataclass(frozen=True, kw_only=True)
class TrialWalls:
    """What one trial takes: the study's measured median (None before one) and the plan's
    prediction (None when the plan has none)."""

    median_s: float | None
    predicted_s: float | None

    def text(self) -> str:
        predicted = "?" if self.predicted_s is None else f"{self.predicted_s:.1f} s"
        if self.median_s is None:
            return f"one trial was predicted to take {predicted}"
        return f"one trial took {self.median_s:.1f} s (median; predicted {predicted})"


def race_size(study: optuna.Study, top_k: int) -> int:
    """The race's contenders as the study stands: its top `top_k` complete trials and the starting
    config when it is not among them; top_k + 1 while fewer than top_k trials completed."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(done) < top_k:
        return top_k + 1
    best_first = study.direction == optuna.study.StudyDirection.MAXIMIZE
    top = sorted(done, key=lambda t: t.value, reverse=best_first)[:top_k]
    start_outside = any(t.user_attrs.get("baseline") for t in done) and not any(
        t.user_attrs.get("baseline") for t in top
    )
    return len(top) + start_outside


class Budget:
    """What is left of a sweep's trials and wall time, measured from `started` on `clock`."""

    def __init__(
        self,
        settings: SweepSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
        wall_setting: str = "budget.max_wall_s",
        predicted_trial_s: float | None = None,
        guard_reserve: Callable[[optuna.Study], float] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.started = clock() if started is None else started
        self.wall_setting = wall_setting  # the setting the wall budget came from (CPU cap)
        self.predicted_trial_s = predicted_trial_s  # the plan's average trial, for the lines
        # the numerics guard's curve runs as the study stands (sweeper/verify/guard.py
        # guard_reserve_s), kept free as the race's rounds are; None: no guard
        self.guard_reserve = guard_reserve

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def wall_left_s(self) -> float | None:
        """Seconds left of the wall budget; None without one."""
        if self.settings.budget.max_wall_s <= 0:
            return None
        return max(0.0, self.settings.budget.max_wall_s - self.elapsed_s())

    def spent(self, study: optuna.Study) -> int:
        """Trials charged to n_trials (`trials_spent`)."""
        return trials_spent(study, listed=self.settings.sampler in LISTED_SAMPLERS)

    @staticmethod
    def median_trial_s(study: optuna.Study) -> float | None:
        """The median wall time of the study's trials that recorded one."""
        walls = [
            t.user_attrs["wall_s"]
            for t in study.get_trials(deepcopy=False)
            if "wall_s" in t.user_attrs
        ]
        return statistics.median(walls) if walls else None

    def verify_reserve_s(self, study: optuna.Study, real_trial_s: float) -> float:
        """Room kept for verification: the race's planned cost, never more than VERIFY_SHARE of a
        wall budget (verification rounds themselves stop at the budget), and the numerics
        guard's curve runs, never more than GUARD_SHARE. `real_trial_s` is a verification run's
        predicted wall when search trials are projected, else 0."""
        s = self.settings
        run_s = max(self.median_trial_s(study) or 0.0, real_trial_s)
        race = verify_reserve(
            run_s=run_s,
            top_k=s.verify.top_k,
            repeats=s.verify.repeats,
            max_wall_s=s.budget.max_wall_s,
        )
        guard = self.guard_reserve(study) if self.guard_reserve is not None else 0.0
        if s.budget.max_wall_s > 0:
            guard = min(guard, GUARD_SHARE * s.budget.max_wall_s)
        return race + guard

    def trials_left(self, study: optuna.Study, verify_estimate_s: float) -> int:
        """How many more trials the search may launch; 0 once the wall budget, less the
        verification estimate, is spent."""
        s = self.settings
        # Running trials count, this worker's parallel ones and those of other workers sharing
        # the study, so N workers stop at n_trials, not up to n_trials + N - 1 (the search reads
        # this and asks under the study's ask lock, sweeper/study/ask_lock.py). An orphan (owner
        # gone, or on another host with a stale heartbeat: recover_interrupted's rule) holds no
        # budget; the next start requeues it.
        if s.n_trials > 0:
            running = len(running_trials(study)[0])
            left = s.n_trials - self.spent(study) - running
        else:
            left = UNLIMITED
        if s.budget.max_wall_s > 0 and self.elapsed_s() + verify_estimate_s >= s.budget.max_wall_s:
            return 0
        return left

    def ended_by(self, study: optuna.Study, verify_estimate_s: float) -> str | None:
        """Which budget leaves no trial to launch: WALL, TRIALS, or None (`trials_left` > 0)."""
        s = self.settings
        if s.budget.max_wall_s > 0 and self.elapsed_s() + verify_estimate_s >= s.budget.max_wall_s:
            return WALL
        return TRIALS if self.trials_left(study, verify_estimate_s) <= 0 else None

    def end_line(self, study: optuna.Study, ended: str, *, ran_here: int) -> str:
        """The search's end in one line: the budget that ended it, what it allowed, and what one
        trial took and was predicted to take. `ran_here`: the trials this worker launched."""
        walls = TrialWalls(
            median_s=self.median_trial_s(study), predicted_s=self.predicted_trial_s
        ).text()
        if ended == WALL:
            return (
                f"the wall budget ended the search: hydra.sweeper.{self.wall_setting}="
                f"{self.settings.budget.max_wall_s:g} s allowed {ran_here} trial(s) in "
                f"{self.elapsed_s():.0f} s, the rest kept for verification; {walls}"
            )
        spent = self.spent(study)
        return (
            f"the trial budget ended the search: hydra.sweeper.n_trials={self.settings.n_trials} "
            f"allowed {self.settings.n_trials} trial(s) in the study ({spent} counted, {ran_here} "
            f"launched here); {walls}"
        )

    def trials_that_fit(self, study: optuna.Study, verify_estimate_s: float, *, left: int) -> int:
        """How many more trials the search can still run: `left` (`trials_left`'s figure, which
        the caller has), and under a wall budget no more than the time left (less the
        verification estimate) holds at the median trial's wall. The polish step
        (sweeper/search/polish.py) starts when this reaches its size."""
        wall_left, median_s = self.wall_left_s(), self.median_trial_s(study)
        if wall_left is not None and median_s:
            left = min(left, int((wall_left - verify_estimate_s) // median_s))
        return max(0, left)

    def eta_s(self, study: optuna.Study) -> float | None:
        """The sweep's remaining time in seconds (`eta`)."""
        return self.eta(study).total_s

    def eta(self, study: optuna.Study, *, real_trial_s: float = 0.0) -> Eta:
        """The sweep's remaining time, from this study's measured walls (sweeper/study/eta.py):
        the trials left and the race (the top k and the starting config), capped by the wall
        budget when that ends the sweep first. `real_trial_s`: a verification run's predicted
        wall where search trials are projected (`verify_reserve_s`), else 0."""
        s = self.settings
        trials = study.get_trials(deepcopy=False)
        walls = [t.user_attrs["wall_s"] for t in trials if "wall_s" in t.user_attrs]
        complete = [
            t.user_attrs["wall_s"]
            for t in trials
            if "wall_s" in t.user_attrs and t.state == TrialState.COMPLETE
        ]
        left = (
            max(0, s.n_trials - self.spent(study))
            if s.n_trials > 0
            else (self.trials_that_fit(study, 0.0, left=UNLIMITED))
        )
        if left >= UNLIMITED:  # no trial budget and no wall budget: no end to predict
            return Eta(
                total_s=None, trials_left=0, trial_s=None, race_runs=0, run_s=None, capped=False
            )
        return estimate(
            trials_left=left,
            trial_walls=walls,
            complete_walls=complete,
            contenders=race_size(study, s.verify.top_k),
            repeats=s.verify.repeats,
            max_rounds=s.verify.max_rounds,
            wall_left_s=self.wall_left_s(),
            predicted_trial_s=self.predicted_trial_s,
            predicted_run_s=real_trial_s,
        )

    def verify_round_fits(
        self, study: optuna.Study, n_runs: int, *, run_s: float | None = None
    ) -> bool:
        """Whether one more verification round of `n_runs` runs fits in the wall budget. `run_s`
        is a verification run's measured wall (the race's last round per run), a better guess
        than the search trials' median, which compile-heavy or projected trials can inflate."""
        if self.settings.budget.max_wall_s <= 0:
            return True
        per_run = run_s if run_s is not None else self.median_trial_s(study) or 0.0
        return self.elapsed_s() + per_run * n_runs <= self.settings.budget.max_wall_s

    def failure_rate_exceeded(self, study: optuna.Study) -> bool:
        """Whether more than max_failure_rate of this worker's counted trials failed (judged
        after budget.min_trials_for_failure_rate of them)."""
        s = self.settings
        # A duplicate or an excluded point ran nothing; an out-of-memory trial is the search
        # learning where memory ends (larger micro-batches are refused after it), not a fault.
        trials = [
            t
            for t in own_outcomes(study)
            if t.user_attrs.get("failure_kind") not in ("excluded", "oom")
        ]
        if len(trials) < s.budget.min_trials_for_failure_rate:
            return False
        failed = sum(1 for t in trials if t.state == TrialState.FAIL)
        if failed / len(trials) > s.budget.max_failure_rate:
            log.error(
                "%d of %d trials failed (> hydra.sweeper.budget.max_failure_rate=%.2f): stopping "
                "the search; see each trial's failure_reason",
                failed,
                len(trials),
                s.budget.max_failure_rate,
            )
            return True
        return False
