"""The sweep, start to end: plan -> search -> verify -> export -> explain.

prepare the request (probe the device in a child process, parse and check the space; a plan stops
here) -> open or resume the study and the parent MLflow run -> search: ask -> refuse unsafe points
-> launch -> tell (complete | pruned | failed + reason) -> verify the top-k in fresh processes ->
noise-aware winner -> best.yaml and plots -> the final table -> the starting config against the
winner. Each step lives in its own module; this one only tells the story.
"""

from __future__ import annotations

import logging
import shlex
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from omegaconf import DictConfig

from sweeper import report
from sweeper.budget import Budget
from sweeper.context import SweepContext
from sweeper.cost_report import cost_lines, sweep_costs
from sweeper.export import export_winner
from sweeper.launch.batch import JobLauncher
from sweeper.launch.runner import kill_all_children
from sweeper.masking import mask_secrets
from sweeper.metrics import best_metrics, lead_metrics
from sweeper.narrative import explain
from sweeper.preflight import check_sweep
from sweeper.prepare import Prepared, prepare, print_plan
from sweeper.search import Search
from sweeper.settings import SweepSettings
from sweeper.start import Started, open_sweep_study, start_tracker
from sweeper.study import DUPLICATE_ATTR, fail_own_running
from sweeper.verification import Verification, verify

log = logging.getLogger(__name__)


class SweepEngine:
    """Hydra's sweeper protocol (setup, sweep) around one sweep."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = SweepSettings.from_config(settings)
        self.started = time.monotonic()  # the wall budget counts from here
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
        prepared = prepare(
            self.settings,
            arguments,
            hydra_context=self.hydra_context,
            config=self.config,
            sweep_dir=sweep_dir,
            fork_trials=launcher == "BasicLauncher",
            launcher=launcher,
        )
        if prepared.settings.plan:
            return print_plan(prepared)
        started = open_sweep_study(prepared, sweep_dir)
        tracker = start_tracker(prepared, started, sweep_dir)
        # SIGTERM stops the sweep as Ctrl-C does: trials killed and recorded, runs closed
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            best_path = self._run(prepared, started, tracker, sweep_dir)
        except KeyboardInterrupt:
            self._interrupted(started, tracker, sweep_dir)
        except BaseException:
            tracker.finish("FAILED")
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
        tracker.finish()
        return {"best_yaml": str(best_path) if best_path else None, "study": started.study_name}

    @staticmethod
    def _interrupted(started: Started, tracker: Any, sweep_dir: Path) -> None:
        """Ctrl-C or SIGTERM: record the running trials as interrupted, close the MLflow runs, and
        say in one line how to resume; exit 130 without a traceback."""
        kill_all_children()
        stopped = fail_own_running(started.study, reason="interrupted: the sweep was stopped")
        tracker.finish("KILLED")
        log.error(
            "sweep interrupted (%d running trial(s) recorded as interrupted); resume with: %s",
            len(stopped),
            resume_command(sys.argv, study_name=started.study_name,
                           storage=mask_secrets(started.storage), sweep_dir=sweep_dir),
        )  # fmt: skip
        sys.exit(130)

    def _run(
        self, prepared: Prepared, started: Started, tracker: Any, sweep_dir: Path
    ) -> Path | None:
        """Search, verify, export, report and explain; the exported best.yaml, if any."""
        settings, study = started.settings, started.study
        budget = Budget(settings, started=self.started)
        jobs = JobLauncher(self.launcher, sweep_dir=sweep_dir, slots=prepared.gpu_slots)
        ctx = SweepContext(study=study, space=prepared.space, settings=settings, budget=budget,
                           tracker=tracker, jobs=jobs, fixed=prepared.fixed,
                           objective=prepared.objective)  # fmt: skip
        Search(ctx, storage=started.storage).run()
        verification = verify(ctx, baseline=started.baseline)
        best_path, costs = None, None
        if verification.winner is not None:
            costs = sweep_costs(study, verification, baseline=started.baseline,
                                objective=ctx.objective, usd_per_hour=settings.usd_per_hour,
                                prices=settings.prices)  # fmt: skip
            best_path = self._export(started, verification, tracker, sweep_dir, costs)
        report.final_report(
            trials=study.get_trials(deepcopy=False),
            duplicate_attr=DUPLICATE_ATTR,
            rows=verification.rows,
            best_path=best_path,
        )
        if costs is not None:
            for line in cost_lines(costs):
                report.console.print(line)
            tracker.log_cost(costs)
        if verification.winner is not None:
            explain(study, verification, baseline=started.baseline,
                    planned_steps=settings.planned_steps, tracker=tracker,
                    noise_floor=settings.noise_floor)  # fmt: skip
        return best_path

    @staticmethod
    def _export(
        started: Started,
        verification: Verification,
        tracker: Any,
        sweep_dir: Path,
        costs: dict[str, Any] | None,
    ) -> Path:
        """best.yaml, the plots, and both on the parent MLflow run with the winner's numbers."""
        from sweeper.plots import sweep_plots

        winner, rows = verification.winner, verification.rows
        best_path = export_winner(
            winner,
            rows,
            sweep_dir=sweep_dir,
            study_name=started.study_name,
            storage=started.storage,
            planned_checkpoint_every=started.settings.planned_checkpoint_every,
            cost=costs,
        )
        artifacts = sweep_plots(started.study, sweep_dir, rows, verification.results)
        tracker.log_best(
            best_yaml=best_path,
            extra_artifacts=artifacts,
            metrics={**best_metrics(next(r for r in rows if r["winner"])),
                     **lead_metrics(winner.lead_over_start)},
            tags={
                "verdict": winner.verdict.reason,
                "decisive": winner.verdict.decisive,
                "winner_trial": winner.number,
                "race.outcome": winner.outcome,
                "race.rounds": winner.rounds,
            },
        )
        return best_path


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
