"""The search loop: ask Optuna for a point, refuse what cannot run, launch the rest, tell the study.

ask -> refuse unsafe points (excluded) and re-proposed ones (duplicates) -> launch each on a free
trial slot (`hydra.sweeper.n_jobs` of them, each with its own GPUs) -> tell each outcome
(complete | pruned | failed with a reason) -> one progress line per trial.
The loop ends when the budget (sweeper/study/budget.py) is spent, the failure rate is exceeded, or
the sampler keeps proposing only points it has seen.
"""

from __future__ import annotations

import logging
import os
import queue
import threading

import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState

from sweeper.context import SweepContext
from sweeper.launch.batch import job_name, ready_point, real_trial_s
from sweeper.launch.stops import stops_deferred
from sweeper.masking import mask_secrets
from sweeper.metrics import summary_metrics
from sweeper.report.console import trial_line
from sweeper.search.polish import interleave, neighbours, point_key
from sweeper.space.overrides import format_override
from sweeper.study.ask_lock import ask_lock
from sweeper.study.objective import objective_value
from sweeper.study.optuna_study import (
    DUPLICATE_ATTR,
    OWNER_ATTR,
    POLISH_ATTR,
    find_running_twin,
    find_twin,
    heartbeats,
    is_own_outcome,
    planned_params,
    trial_id,
)
from sweeper.study.owner import owner_tag
from sweeper.tracking.protocol import TrialLog
from train.core.keys import STUDY_NAME, STUDY_STORAGE
from train.core.result import MEASURED_STATES
from train.core.rules import ENV_REFERENCE, STORAGE_ENV

log = logging.getLogger(__name__)

# a sampler that proposes only measured points this many times in a row has exhausted the space
MAX_DUPLICATE_STREAK = 25
# a sampler that proposes points being measured right now this many times in a row waits for a
# running trial to end (its outcome may move the sampler elsewhere) before it is asked again
RUNNING_TWIN_TRIES = 5
# the polish step starts from this many of the best trials: one measurement each, so on a noisy
# machine the best few are indistinguishable and the true optimum may neighbour any of them
POLISH_PARENTS = 3
HEARTBEAT_S = 10  # seconds between a running trial's heartbeats (StudySpec.heartbeat_interval_s)


class Search:
    """One worker's search over `space` in `study`, until its budget is spent."""

    def __init__(self, ctx: SweepContext, *, storage: str, start: dict | None = None) -> None:
        self.ctx = ctx
        self.start = start  # the starting config's knobs: a trial line names those it changes
        self.storage = storage
        # what the trials are told: a URL with a secret only by the name of the environment
        # variable that holds it (train/core/rules.py STORAGE_ENV), set here for every trial
        self.trial_storage = storage
        if mask_secrets(storage) != storage:
            os.environ[STORAGE_ENV] = storage
            self.trial_storage = f"{ENV_REFERENCE}{STORAGE_ENV}"
        self.streak = 0  # points in a row that ran nothing (excluded or duplicates)
        self.exhausted = False  # the streak reached MAX_DUPLICATE_STREAK (and was said)
        self.twins_running = 0  # points in a row proposed while their twin was measured
        self.width = 1  # trials running at once (run() sets it from n_jobs and the launcher)
        self.real_s = real_trial_s(ctx.space)
        self.launched = 0  # trials this worker launched
        # the budget that ended the search (sweeper/study/budget.py)
        self.ended_by: str | None = None

    def end_line(self) -> str | None:
        """The budget's line on how the search ended, None when no budget ended it."""
        if self.ended_by is None:
            return None
        return self.ctx.budget.end_line(self.ctx.study, self.ended_by, ran_here=self.launched)

    def run(self) -> None:
        """Keep `n_jobs` trials running (one per slot) until the budget is spent: a slot freed
        by a finished or pruned trial is filled at once, never held back for a whole batch.
        Launches run in worker threads only where the launcher runs each job in a process of
        its own (joblib, submitit); with Hydra's basic launcher one trial runs at a time here,
        in this thread. Asking and telling stay in this thread."""
        self.width = width = self.ctx.settings.n_jobs if self.ctx.jobs.parallel else 1
        running: dict[int, tuple[optuna.Trial, int]] = {}  # trial number -> (trial, slot)
        beating: list[optuna.Trial] = []  # the trials whose jobs run now
        free = list(range(width))
        done: queue.Queue[tuple[int, dict]] = queue.Queue()
        try:
            with heartbeats(self.ctx.study, beating, interval_s=HEARTBEAT_S):
                while True:
                    while free and (trial := self._ask()) is not None:
                        asked = self._vet(trial)
                        if self.twins_running >= RUNNING_TWIN_TRIES and running:
                            break  # the sampler wants what runs now: ask again once one ends
                        if asked is None:
                            continue
                        trial, job = asked
                        slot = free.pop(0)
                        beating.append(trial)
                        self.launched += 1
                        if width == 1:
                            out = self.ctx.jobs.launch_one(
                                job, slot=slot, name=job_name(trial.number)
                            )
                            self._finish(trial, out, beating, free, slot)
                            continue
                        running[trial.number] = (trial, slot)
                        self._start(trial.number, job, slot, done)
                    if not running:
                        return
                    number, out = done.get()  # the first job to end, whichever slot it ran on
                    self.twins_running = 0
                    trial, slot = running.pop(number)
                    self._finish(trial, out, beating, free, slot)
        except BaseException:
            if running:  # Ctrl-C, SIGTERM: the trials in other processes are stopped too
                self.ctx.jobs.abort()
            raise

    def _start(self, number: int, job: list[str], slot: int, done: queue.Queue) -> None:
        """Launch one job in a thread of its own, which puts its outcome on `done`. A daemon:
        a sweep that is stopped never waits for a launcher that cannot be interrupted."""

        def work() -> None:
            try:
                out = self.ctx.jobs.launch_one(job, slot=slot, name=job_name(number))
            except Exception as exc:  # the launcher failed: this trial crashed, not the sweep
                out = {
                    "state": "crash",
                    "reason": f"launcher failed: {exc!r}",
                    "result": None,
                    "wall_s": None,
                }
            done.put((number, out))

        threading.Thread(target=work, name=f"trial-{number}", daemon=True).start()

    def _finish(
        self, trial: optuna.Trial, out: dict, beating: list, free: list[int], slot: int
    ) -> None:
        beating.remove(trial)
        free.append(slot)
        with stops_deferred():  # its MLflow run and the study's tell, never one without the other
            self._tell(trial, out)

    def _may_launch(self) -> bool:
        """Whether another trial may start: budget left (trials running here and on other
        workers count), the failure rate not exceeded, the space not exhausted. Near the end of
        the budget it first queues the polish trials, so the next ask runs them."""
        if self.streak >= MAX_DUPLICATE_STREAK:
            if self.exhausted:
                return False  # said once already
            self.exhausted = True
            log.warning(
                "the sampler proposed only already-measured or excluded points %d times in "
                "a row: the space looks exhausted, ending the search",
                self.streak,
            )
            return False
        reserve_s = self.ctx.budget.verify_reserve_s(self.ctx.study, self.real_s)
        left = self.ctx.budget.trials_left(self.ctx.study, reserve_s)
        if left <= 0:
            self.ended_by = self.ctx.budget.ended_by(self.ctx.study, reserve_s)
            return False
        if self.ctx.budget.failure_rate_exceeded(self.ctx.study):
            return False
        self.ended_by = None  # a budget held by running trials may free up again
        self._polish(left, reserve_s)
        return True

    def _polish(self, left: int, reserve_s: float) -> None:
        """Once the trials that still fit (of the `left` the budget allows) are down to the
        polish size, queue unmeasured one-knob neighbours of the best `POLISH_PARENTS` trials,
        taken in turn by rank (one sample each cannot tell the best few apart on a noisy
        machine). One per free slot at a time: each polish trial starts from the ranking the
        previous ones left, so a neighbour that climbs to the top is polished around next
        (sweeper/search/polish.py)."""
        size = self.ctx.settings.polish
        if size <= 0:
            return
        study = self.ctx.study
        fit = self.ctx.budget.trials_that_fit(study, reserve_s, left=left)
        if not 0 < fit <= size:
            return
        trials = study.get_trials(deepcopy=False)
        room = min(fit, self.width) - sum(t.state == TrialState.WAITING for t in trials)
        if room <= 0:
            return
        ranked = sorted(
            (t for t in trials if t.state == TrialState.COMPLETE and is_own_outcome(t)),
            key=lambda t: t.value,
            reverse=study.direction == StudyDirection.MAXIMIZE,
        )[:POLISH_PARENTS]
        seen = {point_key(planned_params(t)) for t in trials}
        lists = [neighbours(self.ctx.space.searched, t.params, seen=seen) for t in ranked]
        queued: list[str] = []
        for params, parent in interleave(lists, ranked):
            if len(queued) >= room:
                break
            key = point_key(params)
            if key in seen or self.ctx.space.check(params) is not None:
                continue
            seen.add(key)
            study.enqueue_trial(params, user_attrs={POLISH_ATTR: parent.number})
            queued.append(f"trial {parent.number} with {_changed(parent.params, params)}")
        if queued:
            log.info(
                "polish (%d trial(s) left): the best trials' unmeasured neighbours: %s",
                fit,
                "; ".join(queued),
            )

    def _ask(self) -> optuna.Trial | None:
        """The next trial, or None where none may start (`_may_launch`). The check and the ask
        are one step under the study's ask lock: workers sharing the study never ask past its
        n_trials (sweeper/study/ask_lock.py)."""
        with ask_lock(self.ctx.study):
            if not self._may_launch():
                return None
            trial = self.ctx.study.ask(self.ctx.space.distributions())
            trial.set_user_attr(OWNER_ATTR, owner_tag())  # counted as this worker's, running
            return trial

    def _vet(self, trial: optuna.Trial) -> tuple[optuna.Trial, list[str]] | None:
        """The asked trial's point to run, as its trial and job overrides; a refused or
        re-proposed point is told at once and runs nothing (None)."""
        # the starting config is measured even where it cannot win: it is what the user runs
        reason = self.ctx.space.check(trial.params, dominance=not trial.user_attrs.get("baseline"))
        if reason is not None:
            with stops_deferred():  # its MLflow run and the study's tell, as for a finished one
                self._refuse(trial, reason)
            return None
        twin = find_twin(self.ctx.study, trial.params, number=trial.number)
        if twin is not None:
            self._tell_duplicate(trial, twin)
            return None
        running = find_running_twin(self.ctx.study, trial.params, number=trial.number)
        if running is not None:
            self._tell_running_twin(trial, running)
            return None
        self.streak = self.twins_running = 0
        point, limits = ready_point(self.ctx.space, self.ctx.settings, trial.params)
        return trial, [
            *self.ctx.fixed,
            *point.overrides(),
            *limits,
            # quoted for Hydra's grammar: a URL's query string (?timeout=60, ?sslmode=require) or
            # a study name with spaces would otherwise not parse in the trial's command line
            format_override(STUDY_STORAGE, self.trial_storage),
            format_override(STUDY_NAME, self.ctx.study.study_name),
            f"trial.trial_id={trial_id(trial)}",
        ]

    def _refuse(self, trial: optuna.Trial, reason: str) -> None:
        """A point the constraints exclude: it runs nothing and costs no budget (Budget.spent)."""
        trial.set_user_attr("failure_kind", "excluded")
        trial.set_user_attr("failure_reason", reason)
        self.ctx.tracker.log_trial(
            TrialLog(number=trial.number, state="excluded", reason=reason, params=trial.params)
        )
        self.ctx.study.tell(trial, state=TrialState.FAIL)
        self._line(trial.number, "excluded", trial.params, None, reason)
        self.streak += 1

    def _tell_running_twin(self, trial: optuna.Trial, twin: optuna.trial.FrozenTrial) -> None:
        """A point proposed while its twin is measured (parallel trials, other workers): run
        nothing; the trial is a duplicate that the budget and the failure rate do not count."""
        trial.set_user_attr(DUPLICATE_ATTR, twin.number)
        trial.set_user_attr("failure_kind", "duplicate")
        trial.set_user_attr("failure_reason", f"same point as trial {twin.number}, running now")
        self.ctx.study.tell(trial, state=TrialState.FAIL)
        log.info(
            "trial %d re-proposes trial %d's point while it runs: not run twice",
            trial.number,
            twin.number,
        )
        # Not the exhaustion streak at first (the point is not measured yet); past the tries,
        # with nothing of this worker's running to wait for (another worker runs the twin), it is
        self.twins_running += 1
        if self.twins_running > RUNNING_TWIN_TRIES:
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
        log.info(
            "trial %d re-proposes trial %d's point (%s): not run again",
            trial.number,
            twin.number,
            state,
        )
        self.streak += 1

    def _tell(self, trial: optuna.Trial, out: dict) -> None:
        """Record a finished trial: attributes and MLflow run first (a finished trial is frozen)."""
        state, result = out["state"], out.get("result")
        for key in ("job_dir", "wall_s"):
            if out.get(key) is not None:
                trial.set_user_attr(key, out[key])
        if result:
            trial.set_user_attr("metrics", summary_metrics(result))
        if state not in MEASURED_STATES:
            trial.set_user_attr("failure_kind", state)
            trial.set_user_attr("failure_reason", (out.get("reason") or "")[-2000:])
        point = self.ctx.space.point(trial.params)
        if state == "oom":  # larger micro-batches with these knobs are refused from now on
            self.ctx.space.record_oom(trial.number, point)
        run_id = self.ctx.tracker.log_trial(TrialLog.of_job(trial.number, out, point.as_dict()))
        if run_id:
            trial.set_user_attr("mlflow_run_id", run_id)
        if state == "complete":
            self.ctx.study.tell(trial, objective_value(result, self.ctx.objective))
        elif state == "pruned":
            self.ctx.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.ctx.study.tell(trial, state=TrialState.FAIL)
        self._line(trial.number, state, trial.params, result, out.get("reason"))

    def _line(
        self, number: int, state: str, params: dict, result: dict | None, reason: str | None
    ) -> None:
        """The trial's progress line: its numbers, then the budget spent, the best and the ETA."""
        try:
            best = self.ctx.study.best_value
        except ValueError:
            best = None
        trial_line(
            number=number,
            state=state,
            params=params,
            result=result,
            reason=reason,
            done=self.ctx.budget.spent(self.ctx.study),
            total=self.ctx.settings.n_trials,
            best=best,
            eta=self.ctx.budget.eta(self.ctx.study, real_trial_s=self.real_s),
            start=self.start,
        )


def _changed(parent: dict, params: dict) -> str:
    """The searched values `params` changes from its `parent`'s, like `batch.micro_batch=8`."""
    return ", ".join(f"{k}={v}" for k, v in params.items() if parent.get(k) != v)
