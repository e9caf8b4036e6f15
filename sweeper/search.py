"""The search loop: ask Optuna for a point, refuse what cannot run, launch the rest, tell the study.

ask -> refuse unsafe points (excluded) and re-proposed ones (duplicates) -> launch a batch of jobs
-> tell each outcome (complete | pruned | failed with a reason) -> one progress line per trial.
The loop ends when the budget (sweeper/budget.py) is spent, the failure rate is exceeded, or the
sampler keeps proposing only points it has seen.
"""

from __future__ import annotations

import logging
from pathlib import Path

import optuna
from optuna.trial import TrialState

from sweeper import report
from sweeper.context import SweepContext
from sweeper.launch.batch import real_trial_s, trial_limits
from sweeper.memory import OutOfMemory
from sweeper.metrics import summary_metrics
from sweeper.objective import objective_value
from sweeper.owner import owner_tag
from sweeper.study import DUPLICATE_ATTR, OWNER_ATTR, find_twin, heartbeats, trial_id

log = logging.getLogger(__name__)

# a sampler that proposes only measured points this many times in a row has exhausted the space
MAX_DUPLICATE_STREAK = 25
HEARTBEAT_S = 10  # seconds between a running trial's heartbeats (StudySpec.heartbeat_interval_s)


class Search:
    """One worker's search over `space` in `study`, until its budget is spent."""

    def __init__(self, ctx: SweepContext, *, storage: str) -> None:
        self.ctx = ctx
        self.storage = storage
        self.streak = 0  # points in a row that ran nothing (excluded or duplicates)

    def run(self) -> None:
        real_s = real_trial_s(self.ctx.space, self.ctx.settings)
        while True:
            if self.streak >= MAX_DUPLICATE_STREAK:
                log.warning(
                    "the sampler proposed only already-measured or excluded points %d times in "
                    "a row: the space looks exhausted, ending the search",
                    self.streak,
                )
                return
            reserve_s = self.ctx.budget.verify_reserve_s(self.ctx.study, real_s)
            left = self.ctx.budget.trials_left(self.ctx.study, reserve_s)
            if left <= 0 or self.ctx.budget.failure_rate_exceeded(self.ctx.study):
                return
            batch, asked = self._ask(min(self.ctx.settings.n_jobs, left))
            if not batch:
                continue
            with heartbeats(self.ctx.study, asked, interval_s=HEARTBEAT_S):
                outs = self.ctx.jobs.launch(batch)
            for trial, out in zip(asked, outs, strict=True):
                self._tell(trial, out)

    def _ask(self, n: int) -> tuple[list[list[str]], list[optuna.Trial]]:
        """Up to `n` new points to run, as job overrides and their trials; refused and
        re-proposed points are told at once and run nothing."""
        batch, asked = [], []
        dists = self.ctx.space.distributions()
        for _ in range(n):
            trial = self.ctx.study.ask(dists)
            trial.set_user_attr(OWNER_ATTR, owner_tag())
            reason = self.ctx.space.check(trial.params)
            if reason is not None:
                self._refuse(trial, reason)
                continue
            twin = find_twin(self.ctx.study, trial.params, number=trial.number)
            if twin is not None:
                self._tell_duplicate(trial, twin)
                continue
            self.streak = 0
            batch.append([
                *self.ctx.fixed,
                *self.ctx.space.to_overrides(trial.params),
                *trial_limits(self.ctx.space, self.ctx.settings, trial.params),
                f"trial.study_storage={self.storage}",
                f"trial.study_name={self.ctx.study.study_name}",
                f"trial.trial_id={trial_id(trial)}",
            ])  # fmt: skip
            asked.append(trial)
        return batch, asked

    def _refuse(self, trial: optuna.Trial, reason: str) -> None:
        """A point the constraints exclude: it runs nothing and costs no budget (Budget.spent)."""
        trial.set_user_attr("failure_kind", "excluded")
        trial.set_user_attr("failure_reason", reason)
        self.ctx.tracker.log_trial(
            number=trial.number,
            state="excluded",
            reason=reason,
            params=dict(trial.params),
            result=None,
            job_dir=None,
        )
        self.ctx.study.tell(trial, state=TrialState.FAIL)
        self._line(trial.number, "excluded", trial.params, None, reason)
        self.streak += 1

    def _tell_duplicate(self, trial: optuna.Trial, twin: optuna.trial.FrozenTrial) -> None:
        """A re-proposed point: the sampler learns the twin's outcome again; nothing runs, and
        the budget is not charged (study.count_finished)."""
        trial.set_user_attr(DUPLICATE_ATTR, twin.number)
        if twin.state == TrialState.COMPLETE:
            self.ctx.study.tell(trial, twin.value)
            state = "complete"
        elif twin.state == TrialState.PRUNED:
            self.ctx.study.tell(trial, state=TrialState.PRUNED)
            state = "pruned"
        else:
            state = twin.user_attrs.get("failure_kind", "crash")
            trial.set_user_attr("failure_kind", state)
            reason = f"same point as trial {twin.number}, which failed"
            trial.set_user_attr("failure_reason", reason)
            self.ctx.study.tell(trial, state=TrialState.FAIL)
        log.info("trial %d re-proposes trial %d's point (%s): not run again", trial.number,
                 twin.number, state)
        self.streak += 1

    def _tell(self, trial: optuna.Trial, out: dict) -> None:
        """Record a finished trial: attributes and MLflow run first (a finished trial is frozen)."""
        state, result = out["state"], out.get("result")
        for key in ("job_dir", "wall_s"):
            if out.get(key) is not None:
                trial.set_user_attr(key, out[key])
        if result:
            trial.set_user_attr("metrics", summary_metrics(result))
        if state not in ("complete", "pruned"):
            trial.set_user_attr("failure_kind", state)
            trial.set_user_attr("failure_reason", (out.get("reason") or "")[-2000:])
        if state == "oom":  # larger micro-batches with these knobs are refused from now on
            config = {**self.ctx.space.ctx.base, **self.ctx.space.point(trial.params)}
            self.ctx.space.ctx.ooms.append(OutOfMemory(trial=trial.number, config=config))
        run_id = self.ctx.tracker.log_trial(
            number=trial.number,
            state=state,
            reason=out.get("reason"),
            params=self.ctx.space.point(trial.params),
            result=result,
            job_dir=Path(out["job_dir"]) if out.get("job_dir") else None,
        )
        if run_id:
            trial.set_user_attr("mlflow_run_id", run_id)
        if state == "complete":
            self.ctx.study.tell(trial, objective_value(result, self.ctx.objective))
        elif state == "pruned":
            self.ctx.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.ctx.study.tell(trial, state=TrialState.FAIL)
        self._line(trial.number, state, trial.params, result, out.get("reason"))

    def _line(self, number: int, state: str, params: dict, result: dict | None,
              reason: str | None) -> None:
        """The trial's progress line: its numbers, then the budget spent, the best and the ETA."""
        try:
            best = self.ctx.study.best_value
        except ValueError:
            best = None
        report.trial_line(
            number=number,
            state=state,
            params=params,
            result=result,
            reason=reason,
            done=self.ctx.budget.spent(self.ctx.study),
            total=self.ctx.settings.n_trials,
            best=best,
            eta_s=self.ctx.budget.eta_s(self.ctx.study),
        )
