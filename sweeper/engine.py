"""The sweep, start to end: plan -> search -> verify -> export -> explain.

prepare the request (probe the device in a child process, parse and check the space; a plan stops
here) -> open or resume the study and the parent MLflow run -> search: ask -> refuse unsafe points
-> launch -> tell (complete | pruned | failed + reason) -> the budget's line; on a shared study only
the last worker goes on (sweeper/study/export_claim.py) -> queued points never run recorded as unrun
-> verify the top-k in fresh processes -> noise-aware winner -> best.yaml and plots -> the final
table -> the starting config against the winner. Each step lives in its own module; this one only
tells the story.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import signal
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from omegaconf import DictConfig

from sweeper.context import SweepContext
from sweeper.launch.batch import JobLauncher
from sweeper.launch.children import kill_all_children
from sweeper.launch.dir_lock import lock_sweep_dir
from sweeper.launch.disk_full import disk_full_line
from sweeper.launch.log_routing import drop_sweep_log
from sweeper.masking import mask_secrets
from sweeper.metrics import best_metrics, lead_metrics
from sweeper.plan.preflight import check_sweep
from sweeper.plan.prepare import Prepared, prepare
from sweeper.report.best_yaml import export_winner
from sweeper.report.claim_text import claim_line, deferral_line
from sweeper.report.console import final_report, print_start, say, start_knobs, trial_states
from sweeper.report.handoff import handoff_report
from sweeper.report.plan_text import print_plan
from sweeper.report.story import tell_story
from sweeper.report.time_to_train import cost_lines, production_plan, sweep_costs
from sweeper.report.verdict_text import record_verdict, winner_text
from sweeper.search.loop import Search
from sweeper.settings import settings_from
from sweeper.start import Started, open_sweep_study, start_tracker
from sweeper.study.budget import Budget
from sweeper.study.export_claim import (
    claim_export,
    compared_trials,
    comparison,
    deferral,
    others_running,
    record_export,
    register_worker,
)
from sweeper.study.optuna_study import DUPLICATE_ATTR, UNRUN, fail_own_running, fail_waiting
from sweeper.tracking.protocol import Tracker
from sweeper.tracking.stopped import log_stopped_trials
from sweeper.verify.guard import guard_reserve_s
from sweeper.verify.stage import Verification, verify
from train.core.evidence import RACE_ATTR
from train.core.handoff.interval import CheckpointPlan

log = logging.getLogger(__name__)


class SweepEngine:
    """Hydra's sweeper protocol (setup, sweep) around one sweep."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings_from(settings)
        self.started = time.monotonic()  # the wall budget counts from here
        self.started_at = time.time()  # an export of a shared study made since is another's
        self.hydra_context: Any = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> dict:
        sweep_dir = Path(self.config.hydra.sweep.dir).resolve()
        launcher = type(self.launcher).__name__
        # before the zygote, the study, any folder
        check_sweep(self.settings, sweep_dir, launcher=launcher)
        # one sweep per folder: a second one here would number its jobs as this one does
        try:
            held = None if self.settings.plan.enabled else lock_sweep_dir(sweep_dir)
        except ValueError:
            drop_sweep_log()  # that folder's log is the other sweep's
            raise
        try:
            prepared = prepare(
                self.settings,
                arguments,
                hydra_context=self.hydra_context,
                config=self.config,
                sweep_dir=sweep_dir,
                fork_trials=launcher == "BasicLauncher",
                launcher=launcher,
            )
        except BaseException:
            if held is not None:
                held.release(tidy=True)  # a refused sweep leaves no folder of its own
            raise
        if prepared.settings.plan.enabled:
            return print_plan(prepared)
        started = open_sweep_study(prepared, sweep_dir)
        register_worker(started.study, sweep_dir)
        tracker = start_tracker(prepared, started, sweep_dir)
        # SIGTERM stops the sweep as Ctrl-C does: trials killed and recorded, runs closed
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            best_path = self._run(prepared, started, tracker, sweep_dir)
        except KeyboardInterrupt:
            self._interrupted(started, tracker, sweep_dir, point=prepared.space.point)
        except Exception as exc:
            tracker.finish("FAILED")
            self._stop_if_disk_full(exc, started, sweep_dir)
            raise
        except BaseException:
            tracker.finish("FAILED")
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            if held is not None:
                held.release()
        tracker.finish()
        return {"best_yaml": str(best_path) if best_path else None, "study": started.study_name}

    @staticmethod
    def _stop_if_disk_full(exc: Exception, started: Started, sweep_dir: Path) -> None:
        """A write of the sweep's own met a full disk: the running trials stopped and recorded
        where the study can still be written, one line (what, where, what is kept, the resume),
        exit 1. Any other error returns, to be raised as it was."""
        storage = mask_secrets(started.storage)
        resume = resume_command(
            sys.argv, study_name=started.study_name, storage=storage, sweep_dir=sweep_dir
        )
        line = disk_full_line(exc, sweep_dir=sweep_dir, storage=storage, resume=resume)
        if line is None:
            return
        kill_all_children()
        with contextlib.suppress(Exception):  # the study's disk may be the full one
            fail_own_running(started.study, reason="stopped: the disk was full")
        log.error("%s", line)
        sys.exit(1)

    @staticmethod
    def _interrupted(started: Started, tracker: Tracker, sweep_dir: Path, *, point) -> None:
        """Ctrl-C or SIGTERM: record the running trials as interrupted (each with its MLflow run),
        close the parent run KILLED (the resumed sweep reopens it), and say in one line how to
        resume; exit 130 without a traceback. A second Ctrl-C while this runs is said, not
        obeyed: cut short here, the trials and the parent run would be left RUNNING."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _already_stopping)
        kill_all_children()
        stopped = fail_own_running(started.study, reason="interrupted: the sweep was stopped")
        log_stopped_trials(tracker, started.study, stopped, sweep_dir=sweep_dir, point=point)
        tracker.finish("KILLED")
        log.error(
            "sweep interrupted (%d running trial(s) recorded as interrupted); resume with: %s",
            len(stopped),
            resume_command(
                sys.argv,
                study_name=started.study_name,
                storage=mask_secrets(started.storage),
                sweep_dir=sweep_dir,
            ),
        )
        for sig in (signal.SIGINT, signal.SIGTERM):  # nor at the interpreter's exit
            signal.signal(sig, signal.SIG_IGN)
        sys.exit(130)

    def _run(
        self, prepared: Prepared, started: Started, tracker: Tracker, sweep_dir: Path
    ) -> Path | None:
        """Search, then (the last worker on the study) verify, export, report and explain; the
        exported best.yaml, if any. Exits 1 when this worker had to export and could not."""
        settings, study = started.settings, started.study
        # the CPU sweep's cap
        capped = self.settings.budget.max_wall_s <= 0 < settings.budget.max_wall_s
        budget = Budget(
            settings,
            started=self.started,
            wall_setting="budget.cpu_max_wall_s" if capped else "budget.max_wall_s",
            predicted_trial_s=prepared.found.mean_trial_s,
            guard_reserve=partial(guard_reserve_s, space=prepared.space, settings=settings),
        )
        ctx = SweepContext(
            study=study,
            space=prepared.space,
            fixed=prepared.fixed,
            objective=prepared.objective,
            jobs=JobLauncher(self.launcher, sweep_dir=sweep_dir, slots=prepared.gpu_slots),
            settings=settings,
            budget=budget,
            tracker=tracker,
        )
        start = start_knobs(
            [q.key for q in prepared.space.searched], prepared.space.base, started.baseline
        )
        print_start(start, in_space=started.baseline is not None)
        search = Search(ctx, storage=started.storage, start=start)
        search.run()
        budget_line = search.end_line()
        notes = [budget_line] if budget_line else []
        running = others_running(study)
        if running:  # another worker ends last: it verifies and exports the study's best
            self._close(study, [*notes, deferral_line(deferral(study, running))])
            return None
        unrun = fail_waiting(
            study,
            reason=f"not run: {budget_line or 'the search ended'}; a resumed sweep queues it again",
        )
        if unrun:
            notes.append(
                f"queued trial(s) {', '.join(map(str, unrun))} not run: recorded as "
                f"{UNRUN}; a resumed sweep queues them again"
            )
        compared = compared_trials(study)
        if not compared:
            self._close(study, notes)
            self._nothing_exported(started, sweep_dir, budget_line)
        claim = claim_export(study, sweep_dir=sweep_dir, compared=compared, since=self.started_at)
        if not claim.ours:
            self._close(study, [*notes, claim_line(claim)])
            return None
        try:
            best_path = self._verify_and_export(ctx, started, tracker, sweep_dir, notes, start)
            if best_path is not None:
                record_export(study, best_yaml=best_path, compared=compared)
        finally:
            claim.release(study)
        if best_path is None:
            sys.exit(1)  # verification said why in one line (every verification run failed)
        return best_path

    @staticmethod
    def _close(study: Any, notes: list[str]) -> None:
        """The end of a sweep that exports nothing itself: how its trials ended, and why."""
        final_report(
            trials=study.get_trials(deepcopy=False),
            duplicate_attr=DUPLICATE_ATTR,
            rows=[],
            best_path=None,
            notes=notes,
        )

    @staticmethod
    def _nothing_exported(started: Started, sweep_dir: Path, budget_line: str | None) -> None:
        """No trial completed: one line that says how the trials ended, the budget that ended
        the search, and the way on; exit 1."""
        trials = started.study.get_trials(deepcopy=False)
        states = trial_states(trials, DUPLICATE_ATTR).removeprefix("trials: ")
        why = f"; {budget_line}" if budget_line else ""
        ways = []
        if any(
            t.user_attrs.get("failure_reason") and t.user_attrs.get("failure_kind") != UNRUN
            for t in trials
        ):
            ways.append("see each failed trial's failure_reason (and trial.log in its job dir)")
        if budget_line:
            ways.append(
                "raise the budget and resume with: "
                + resume_command(
                    sys.argv,
                    study_name=started.study_name,
                    storage=mask_secrets(started.storage),
                    sweep_dir=sweep_dir,
                )
            )
        log.error(
            "no trial completed (%s)%s: nothing to verify or export%s",
            states or "none ran",
            why,
            "".join(f"; {w}" for w in ways),
        )
        sys.exit(1)

    def _verify_and_export(
        self,
        ctx: SweepContext,
        started: Started,
        tracker: Tracker,
        sweep_dir: Path,
        notes: list[str],
        start: dict,
    ) -> Path | None:
        """Verify the study's contenders, export the winner, print the report (each verified
        config's knobs against `start`, the starting config's) and explain it."""
        settings, study = started.settings, started.study
        verification = verify(ctx, baseline=started.baseline)
        best_path, costs, plan = None, None, None
        if verification.winner is not None:
            record_verdict(study, verification.winner)  # on the study and in sweep.log
            # production saves at an interval chosen from the winner's measured save stall
            plan = production_plan(
                verification.winner.results, objective=ctx.objective, cost=settings.cost
            )
            costs = sweep_costs(
                study,
                verification,
                baseline=started.baseline,
                objective=ctx.objective,
                cost=settings.cost,
                winner_plan=plan,
            )
            best_path = self._export(started, verification, tracker, sweep_dir, costs, plan)
        final_report(
            trials=study.get_trials(deepcopy=False),
            duplicate_attr=DUPLICATE_ATTR,
            rows=verification.rows,
            best_path=best_path,
            notes=[*notes, *verification.notes],  # the numerics guard's verdicts, with curves
            start=start,
        )
        if costs is not None:
            for line in cost_lines(costs):
                say(line)
            tracker.log_cost(costs)
        if best_path is not None:  # the interval, and the nanoGPT and llm.c files beside it
            for line in handoff_report(best_path, study.get_trials(deepcopy=False), plan):
                say(line)
        if verification.winner is not None:
            tell_story(
                study,
                verification,
                baseline=started.baseline,
                planned_steps=settings.cost.planned_steps,
                tracker=tracker,
                noise_floor=settings.verify.noise_floor,
            )
        return best_path

    @staticmethod
    def _export(
        started: Started,
        verification: Verification,
        tracker: Tracker,
        sweep_dir: Path,
        costs: dict[str, Any] | None,
        plan: CheckpointPlan | None = None,
    ) -> Path:
        """best.yaml, the plots, and both on the parent MLflow run with the winner's numbers."""
        from sweeper.report.plots import sweep_plots

        winner, rows = verification.winner, verification.rows
        best_path = export_winner(
            winner,
            rows,
            sweep_dir=sweep_dir,
            study_name=started.study_name,
            storage=started.storage,
            planned_checkpoint_every=started.settings.cost.planned_checkpoint_every,
            cost=costs,
            compared=comparison(started.study, rows),
            checkpoint=plan,
            race=started.study.user_attrs.get(RACE_ATTR),
        )
        artifacts = sweep_plots(started.study, sweep_dir, rows, verification.results)
        tracker.log_best(
            best_yaml=best_path,
            extra_artifacts=artifacts,
            metrics={
                **best_metrics(next(r for r in rows if r["winner"])),
                **lead_metrics(winner.lead_over_start),
            },
            tags={
                "verdict": winner_text(winner),
                "decisive": winner.verdict.decisive,
                "winner_trial": winner.number,
                "race.outcome": winner.outcome,
                "race.rounds": winner.rounds,
            },
        )
        return best_path


def _already_stopping(signum: int, frame: object) -> None:
    log.warning("already stopping: recording the running trials and closing the runs first")


def resume_command(argv: list[str], *, study_name: str, storage: str, sweep_dir: Path) -> str:
    """The command that resumes this sweep: the same overrides, the same study and storage, and the
    original sweep dir (a resumed sweep continues there)."""
    pinned = ("hydra.sweeper.study_name=", "hydra.sweeper.storage=", "hydra.sweep.dir=")
    kept = [a for a in argv[1:] if not a.lstrip("+").startswith(pinned)]
    tail = [
        f"hydra.sweeper.study_name={study_name}",
        f"hydra.sweeper.storage={storage}",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    return shlex.join(["python", Path(argv[0]).name, *kept, *tail])
