"""The sweep itself: ask Optuna for knobs, launch each trial as a Hydra job, tell the study,
verify, export.

probe the device (child process) -> parse + check the space -> open/resume the study
-> search: ask -> refuse unsafe points -> launch -> tell (complete | pruned | failed + reason)
-> verify the top-k in fresh processes -> noise-aware winner -> best.yaml -> final table
"""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState

from sweeper import report
from sweeper.design import latin_design
from sweeper.export import best_config_document, train_command, write_best_yaml
from sweeper.launch.job import prestart_zygote
from sweeper.limits import TrialTime, limit_overrides
from sweeper.memory import OutOfMemory, past_ooms
from sweeper.objective import (
    ObjectiveConfig,
    direction,
    objective_value,
    searched_interval_warning,
)
from sweeper.plan import (
    build_plan,
    device_facts,
    drop_dead_values,
    format_plan,
    point_limits,
    scan,
    startup_lines,
)
from sweeper.space import SpaceContext, baseline_params, cpus_here, parse_space
from sweeper.study import (
    DUPLICATE_ATTR,
    OWNER_ATTR,
    StudySpec,
    _owner_alive,
    count_finished,
    find_twin,
    heartbeats,
    mask_url,
    open_study,
    own_outcomes,
    owner_tag,
    recover_interrupted,
    sampler_seed,
)
from sweeper.verify import Candidate, pick_winner
from train.trial.pruning import OBJECTIVE_ATTR

log = logging.getLogger(__name__)
PROJECT_DIR = Path(__file__).resolve().parents[1]
VERIFY_WITHIN = 0.8  # verify only configs within 20% of the best objective value
# Verification measures real full optimizer steps: a projection (train/trial/measurement.py) is a
# search shortcut, never what a winner is exported on.
REAL_STEP_KEYS = (("trial.project_above_s", 0),)
REAL_STEPS = tuple(f"{k}={v}" for k, v in REAL_STEP_KEYS)
VERIFY_SHARE = 0.35  # at most this share of a wall budget is held back for verification
# a sampler that proposes only measured points this many times in a row has exhausted the space
MAX_DUPLICATE_STREAK = 25
DESIGN_ATTR = "design"  # a queued startup point of the Latin-hypercube design
HEARTBEAT_S = 10  # seconds between a running trial's heartbeats (StudySpec.heartbeat_interval_s)


def probe_device(timeout_s: float = 180.0) -> dict:
    """Ask a child process what the machine offers, so this process never imports torch."""
    out = subprocess.run(
        [sys.executable, "-m", "train.proc.probe"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=PROJECT_DIR,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"device probe failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def split_arguments(arguments: list[str]) -> tuple[list[str], dict[str, str]]:
    """Command-line overrides: fixed ones go to every trial; sweep ones (a,b / choice() / range())
    join
    the search space."""
    parser = OverridesParser.create()
    fixed, sweeps = [], {}
    for ov in parser.parse_overrides(arguments):
        if ov.is_sweep_override():
            sweeps[ov.get_key_element()] = ov.input_line.split("=", 1)[1]
        else:
            fixed.append(ov.input_line)
    return fixed, sweeps


class SweepEngine:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.s = OmegaConf.create({k: v for k, v in settings.items() if k != "_target_"})
        self.job_idx = 0
        self.started = time.monotonic()
        self.verify_results: dict[int, list[dict]] = {}  # trial number -> its verification results
        self._real_trial_cache: float | None = None  # _real_trial_s, once per sweep

    # -- Hydra's sweeper protocol -------------------------------------------------------------
    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> dict:
        s = self.s
        sweep_dir = Path(self.config.hydra.sweep.dir).resolve()
        fixed, cli_space = split_arguments(arguments)

        # Everything that can be wrong with the request is found here, before any trial starts.
        objective = ObjectiveConfig(
            name=s.objective,
            planned_steps=s.planned_steps,
            planned_checkpoint_every=s.planned_checkpoint_every,
        )
        base_cfg = self.hydra_context.config_loader.load_sweep_config(
            master_config=self.config, sweep_overrides=fixed
        )
        trainer = OmegaConf.to_container(base_cfg, resolve=False)
        trainer.pop("hydra", None)
        base = flatten(trainer)
        plan_only = bool(s.get("plan"))
        if type(self.launcher).__name__ == "BasicLauncher" and not plan_only:
            # trials run in this process's main thread: fork them from a preloaded zygote,
            # whose imports overlap the probe below
            sweep_dir.mkdir(parents=True, exist_ok=True)
            prestart_zygote(sweep_dir)
        # a plan for a named device needs no probe (and no torch) here
        facts = None if plan_only and s.get("plan_device") else probe_device()
        device = device_facts(facts, plan_device=s.get("plan_device") or "", cpu_count=cpus_here())
        if device.device_type == "cpu":
            log.warning(
                "no CUDA device found: sweeping on the CPU (%d cores) with model=%s",
                device.cpu_count,
                base["model.name"],
            )
            if s.max_wall_s <= 0 and s.cpu_max_wall_s > 0:
                self.s.max_wall_s = s.cpu_max_wall_s
                log.warning(
                    "CPU sweep capped at %.0f s, verification included "
                    "(hydra.sweeper.cpu_max_wall_s; set hydra.sweeper.max_wall_s to change it)",
                    s.cpu_max_wall_s,
                )
        else:
            log.info("sweeping on %s (%s) with model=%s", device.name, device.source,
                     base["model.name"])
        ctx = SpaceContext(
            tokens_per_step=base["batch.tokens_per_step"],
            block_size=base["model.block_size"],
            world_size=1,
            cpu_count=device.cpu_count,
            device_type=device.device_type,
            bf16_supported=device.bf16_supported,
            base=base,
            device_name=device.name,
            device_memory_gib=device.memory_gib,
        )
        space = parse_space({**OmegaConf.to_container(s.space), **cli_space}, ctx)
        space.require_feasible(ctx)
        # the memory model's drops, choices no runnable point has, the trials' limits
        found = scan(space, ctx, timeout_s=s.trial_timeout_s, stall_timeout_s=s.stall_timeout_s)
        space = drop_dead_values(space, found)
        for line in startup_lines(found, ctx):
            log.info(line)
        if plan_only:
            plan = build_plan(space=space, ctx=ctx, device=device, settings=dict(s), found=found)
            report.console.print(format_plan(plan), markup=False)
            return {"plan": True, "kept": found.kept, "dropped": found.dropped_points}
        sweep_dir.mkdir(parents=True, exist_ok=True)
        warning = searched_interval_warning(objective, {p.key for p in space.searched})
        if warning:
            log.warning(warning)
        storage = s.storage or f"sqlite:///{Path.cwd() / 'sweeps' / 'optuna.db'}"
        study_name = s.study_name or (
            f"throughput-{base['model.name']}-{s.search_name}-{device.device_type}"
        )
        spec = StudySpec(
            storage=storage,
            study_name=study_name,
            direction=direction(objective),
            sampler=s.sampler,
            pruner=s.pruner,
            n_startup_trials=s.n_startup_trials,
            pruner_warmup_steps=s.pruner_warmup_steps,
            pruner_startup_trials=s.pruner_startup_trials,
            seed=s.seed,
        )
        # A grid is every feasible point queued once in the study (Optuna's GridSampler stops the
        # study from inside tell(), which an ask/tell loop cannot take; queued points also resume).
        grid_points = space.grid_points(ctx) if s.sampler == "grid" else None
        if grid_points is not None:
            spec.sampler = "random"
            if s.n_trials <= 0:
                self.s.n_trials = len(grid_points)
        study = open_study(spec)
        if grid_points is not None:
            queue_grid(study, grid_points)
        # the child reports running tokens/s in these units (train/trial/pruning.py)
        study.set_user_attr(OBJECTIVE_ATTR, {
            "name": objective.name,
            "planned_tokens": objective.planned_steps * ctx.tokens_per_step,
        })  # fmt: skip
        ctx.ooms.extend(past_ooms(own_outcomes(study), space))
        baseline = baseline_params(
            space, base, device_type=device.device_type, bf16=device.bf16_supported
        )
        if grid_points is None and baseline is not None and not any(
            t.user_attrs.get("baseline") for t in study.get_trials(deepcopy=False)
        ):
            # The starting config is measured first, so the report can say what changed and why.
            study.enqueue_trial(baseline, user_attrs={"baseline": True})
        self.baseline = baseline
        if s.sampler == "tpe":
            self._queue_design(study, space, baseline)
        study.set_user_attr("search_space", {k: str(v) for k, v in s.space.items()})
        recover_interrupted(study)
        log.info("study %r in %s; sweep dir %s", study_name, mask_url(storage), sweep_dir)
        self.space = space
        self.tracker = make_tracker(s, experiment=s.mlflow_experiment or study_name)
        self.tracker.start_sweep(
            run_name=f"sweep-{sweep_dir.parent.name}-{sweep_dir.name}",
            params={
                "search_space": json.dumps(OmegaConf.to_container(s.space)),
                "search_name": s.search_name,
                "sampler": s.sampler,
                "pruner": s.pruner,
                "objective": s.objective,
                "n_trials": s.n_trials,
                "verify_top_k": s.verify_top_k,
                "verify_repeats": s.verify_repeats,
                **{f"fixed.{o.split('=', 1)[0]}": o.split("=", 1)[1] for o in fixed},
            },
            tags={
                "study": study_name,
                "storage": mask_url(storage),
                "device": device.name if device.device_type == "cuda"
                else f"cpu ({device.cpu_count} cores)",
                "device_type": device.device_type,
                "torch": (facts or {}).get("torch", ""),
                "model": base["model.name"],
                "git_commit": git_commit(),
                "sweep_dir": str(sweep_dir),
            },
        )
        try:
            self._search(study, space, ctx, fixed, objective, storage)
            verdict_rows, winner = self._verify(study, space, ctx, fixed, objective)
            best_path = None
            if winner is not None:
                best_path = self._export(winner, sweep_dir, study_name, storage, verdict_rows)
                self._plots_and_best(study, sweep_dir, best_path, verdict_rows, winner)
            self._final_report(verdict_rows, best_path, study)
            if winner is not None:
                self._explain(study, winner)
        except BaseException:
            self.tracker.finish("FAILED")
            raise
        self.tracker.finish()
        return {"best_yaml": str(best_path) if best_path else None, "study": study_name}

    def _queue_design(self, study, space, baseline: dict | None) -> None:
        """TPE's startup trials as a Latin-hypercube design (sweeper/design.py), queued once per
        study, after the starting config (which is one of them)."""
        s = self.s
        trials = study.get_trials(deepcopy=False)
        if any(t.user_attrs.get(DESIGN_ATTR) for t in trials) or len(trials) > 1:
            return  # queued already, or a resumed study that is past its start
        n = s.n_startup_trials - (baseline is not None)
        if s.n_trials > 0:
            n = min(n, s.n_trials - (baseline is not None))
        points = latin_design(
            space.distributions(),
            max(0, n),
            seed=sampler_seed(s.seed),
            accept=lambda p: p != baseline and space.check(p) is None,
        )
        for point in points:
            study.enqueue_trial(point, user_attrs={DESIGN_ATTR: True})
        if points:
            log.info("TPE starts from %d spread-out points (a Latin-hypercube design)", len(points))

    # -- search ---------------------------------------------------------------------------------
    def _budget_left(self, study: optuna.Study, verify_estimate_s: float) -> int:
        s = self.s
        # Trials that other workers sharing the study are running count too (this loop has told
        # all of its own by now), so N workers stop at n_trials, not up to n_trials + N - 1. An
        # orphan (owner gone, or on another host with a stale heartbeat: recover_interrupted's
        # rule) holds no budget; the next start requeues it.
        stale = set(study._storage._get_stale_trial_ids(study._study_id))
        running = 0
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            alive = _owner_alive(t.user_attrs.get(OWNER_ATTR))
            running += alive is True or (alive is None and t._trial_id not in stale)
        left = (s.n_trials - self._spent(study) - running) if s.n_trials > 0 else 10**9
        if s.max_wall_s > 0:
            elapsed = time.monotonic() - self.started
            if elapsed + verify_estimate_s >= s.max_wall_s:
                return 0
        return left

    def _median_trial_s(self, study: optuna.Study) -> float | None:
        walls = [
            t.user_attrs["wall_s"]
            for t in study.get_trials(deepcopy=False)
            if "wall_s" in t.user_attrs
        ]
        return statistics.median(walls) if walls else None

    def _search(self, study, space, ctx, fixed, objective, storage) -> None:
        s = self.s
        dists = space.distributions()
        streak = 0  # duplicates in a row
        while True:
            if streak >= MAX_DUPLICATE_STREAK:
                log.warning(
                    "the sampler proposed only already-measured or excluded points %d times in "
                    "a row: the space looks exhausted, ending the search",
                    streak,
                )
                break
            median_s = self._median_trial_s(study)
            # Room kept for verification: its planned cost, but never more than VERIFY_SHARE of a
            # wall budget (verification rounds themselves stop at the budget).
            verify_run_s = max(median_s or 0.0, self._real_trial_s(space))
            verify_est = verify_run_s * (s.verify_top_k + 1) * s.verify_repeats
            if s.max_wall_s > 0:
                verify_est = min(verify_est, VERIFY_SHARE * s.max_wall_s)
            left = self._budget_left(study, verify_est)
            if left <= 0 or self._failure_rate_exceeded(study):
                break
            batch, asked = [], []
            for _ in range(min(s.n_jobs, left)):
                trial = study.ask(dists)
                trial.set_user_attr(OWNER_ATTR, owner_tag())
                reason = space.check(trial.params)
                if reason is not None:
                    trial.set_user_attr("failure_kind", "excluded")
                    trial.set_user_attr("failure_reason", reason)
                    self.tracker.log_trial(
                        number=trial.number,
                        state="excluded",
                        reason=reason,
                        params=dict(trial.params),
                        result=None,
                        job_dir=None,
                    )
                    study.tell(trial, state=TrialState.FAIL)
                    self._line(study, trial.number, "excluded", trial.params, None, reason)
                    streak += 1  # it ran nothing, and costs no budget (self._spent)
                    continue
                twin = find_twin(study, trial.params, number=trial.number)
                if twin is not None:
                    self._tell_duplicate(study, trial, twin)
                    streak += 1
                    continue
                streak = 0
                overrides = [
                    *fixed,
                    *space.to_overrides(trial.params),
                    *self._limits(space, trial.params),
                    f"trial.study_storage={storage}",
                    f"trial.study_name={study.study_name}",
                    f"trial.trial_id={trial._trial_id}",
                ]
                batch.append(overrides)
                asked.append(trial)
            if not batch:
                continue
            with heartbeats(study, asked, interval_s=HEARTBEAT_S):
                returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            self.job_idx += len(batch)
            for trial, ret in zip(asked, returns, strict=True):
                out = self._job_output(ret)
                self._tell(study, trial, out, objective)

    def _real_trial_s(self, space) -> float:
        """A verification run's predicted wall when the starting config's search trial is
        projected (verification measures real full steps, which a projected search trial's median
        wall underestimates); 0 otherwise, when the search trials' own median is the estimate."""
        if self._real_trial_cache is None:
            def expected(extra: dict) -> TrialTime:
                return point_limits(
                    extra, space.ctx, timeout_s=self.s.trial_timeout_s,
                    stall_timeout_s=self.s.stall_timeout_s,
                ).expected  # fmt: skip

            projected = expected({}).projected
            self._real_trial_cache = expected(dict(REAL_STEP_KEYS)).total_s if projected else 0.0
        return self._real_trial_cache

    def _limits(self, space, params: dict, extra: dict | None = None) -> list[str]:
        """The trial's hard and stall limits as job overrides (sweeper/limits.py); `extra` are
        trainer keys the job sets besides the point's (verification's real full steps)."""
        limits = point_limits(
            {**space.point(params), **(extra or {})},
            space.ctx,
            timeout_s=self.s.trial_timeout_s,
            stall_timeout_s=self.s.stall_timeout_s,
        )
        return limit_overrides(limits)

    def _spent(self, study) -> int:
        """Trials charged to n_trials: excluded points ran nothing and cost none, except in a
        grid, whose budget is its list of points."""
        done = count_finished(study)
        if self.s.get("sampler") == "grid":
            return done
        excluded = sum(
            t.user_attrs.get("failure_kind") == "excluded" for t in own_outcomes(study)
        )
        return done - excluded

    def _tell_duplicate(self, study, trial, twin) -> None:
        """A re-proposed point: the sampler learns the twin's outcome again; nothing runs, and
        the budget is not charged (study.count_finished)."""
        trial.set_user_attr(DUPLICATE_ATTR, twin.number)
        if twin.state == TrialState.COMPLETE:
            study.tell(trial, twin.value)
            state = "complete"
        elif twin.state == TrialState.PRUNED:
            study.tell(trial, state=TrialState.PRUNED)
            state = "pruned"
        else:
            state = twin.user_attrs.get("failure_kind", "crash")
            trial.set_user_attr("failure_kind", state)
            reason = f"same point as trial {twin.number}, which failed"
            trial.set_user_attr("failure_reason", reason)
            study.tell(trial, state=TrialState.FAIL)
        log.info("trial %d re-proposes trial %d's point (%s): not run again", trial.number,
                 twin.number, state)

    @staticmethod
    def _job_output(ret) -> dict:
        if ret.status == JobStatus.COMPLETED:
            return ret.return_value
        err = ret._return_value  # the exception the job raised (Hydra keeps it there)
        return {"state": "crash", "reason": f"job failed: {err!r}", "result": None, "wall_s": None}

    def _tell(self, study, trial, out: dict, objective) -> None:
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
            config = {**self.space.ctx.base, **self.space.point(trial.params)}
            self.space.ctx.ooms.append(OutOfMemory(trial=trial.number, config=config))
        run_id = self.tracker.log_trial(
            number=trial.number,
            state=state,
            reason=out.get("reason"),
            params=self.space.point(trial.params),
            result=result,
            job_dir=Path(out["job_dir"]) if out.get("job_dir") else None,
        )
        if run_id:
            trial.set_user_attr("mlflow_run_id", run_id)
        if state == "complete":
            study.tell(trial, objective_value(result, objective))
        elif state == "pruned":
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, state=TrialState.FAIL)
        self._line(study, trial.number, state, trial.params, result, out.get("reason"))

    def _line(self, study, number, state, params, result, reason) -> None:
        s = self.s
        done = self._spent(study)
        try:
            best = study.best_value
        except ValueError:
            best = None
        median_s = self._median_trial_s(study)
        remaining = max(0, s.n_trials - done) if s.n_trials > 0 else None
        eta = (
            median_s * (remaining + s.verify_top_k * s.verify_repeats)
            if median_s is not None and remaining is not None
            else None
        )
        if s.max_wall_s > 0:  # the wall budget ends the sweep first if it is tighter
            left_s = max(0.0, s.max_wall_s - (time.monotonic() - self.started))
            eta = left_s if eta is None else min(eta, left_s)
        report.trial_line(
            number=number,
            state=state,
            params=params,
            result=result,
            reason=reason,
            done=done,
            total=s.n_trials,
            best=best,
            eta_s=eta,
        )

    def _failure_rate_exceeded(self, study) -> bool:
        s = self.s
        # A duplicate or an excluded point ran nothing; an out-of-memory trial is the search
        # learning where memory ends (larger micro-batches are refused after it), not a fault.
        trials = [
            t for t in own_outcomes(study)
            if t.user_attrs.get("failure_kind") not in ("excluded", "oom")
        ]  # fmt: skip
        if len(trials) < s.min_trials_for_failure_rate:
            return False
        failed = sum(1 for t in trials if t.state == TrialState.FAIL)
        if failed / len(trials) > s.max_failure_rate:
            log.error(
                "%d of %d trials failed (> hydra.sweeper.max_failure_rate=%.2f): stopping the "
                "search; see each trial's failure_reason",
                failed,
                len(trials),
                s.max_failure_rate,
            )
            return True
        return False

    # -- verification ---------------------------------------------------------------------------
    def _verify(self, study, space, ctx, fixed, objective):
        s = self.s
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
        if not complete:
            log.error("no trial completed: nothing to verify or export")
            return [], None
        reverse = direction(objective) == "maximize"
        complete.sort(key=lambda t: t.value, reverse=reverse)
        # Re-measure only contenders: a config far behind the best cannot win on noise.
        best_value = complete[0].value
        complete = [
            t
            for t in complete
            if (
                t.value >= VERIFY_WITHIN * best_value
                if reverse
                else t.value * VERIFY_WITHIN <= best_value
            )
        ]
        top, seen = [], set()
        for t in complete:
            key = json.dumps(t.params, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                top.append(t)
            if len(top) == s.verify_top_k:
                break
        # The starting config is always re-measured beside the finalists, so the report compares
        # like with like (the same rounds, the same real full steps), whatever its search rank.
        base_trial = find_baseline(study, self.baseline)
        start_added = base_trial is not None and all(t.number != base_trial.number for t in top)
        if start_added:
            top.append(base_trial)
        cands = {
            t.number: Candidate(
                key=json.dumps(t.params, sort_keys=True, default=str),
                params=dict(t.params),
                overrides=[
                    *fixed,
                    *space.to_overrides(t.params),
                    *REAL_STEPS,
                    *self._limits(space, t.params, dict(REAL_STEP_KEYS)),
                ],
                values=[],
                simplicity=space.defaults_distance(t.params, ctx.base),
            )
            for t in top
        }
        results: dict[int, list[dict]] = {n: [] for n in cands}
        self.verify_results = results
        if start_added:
            which = f"the top {len(cands) - 1} and the starting config"
        elif base_trial is not None:
            which = f"the top {len(cands)}, the starting config among them"
        else:
            which = f"the top {len(cands)}"
        log.info(
            "verifying %d configs (%s), %d fresh runs each, with real full optimizer steps (never "
            "projected)",
            len(cands),
            which,
            s.verify_repeats,
        )
        # Interleaved (A, B, C, A, B, C, ...) so slow drift of the machine hits every candidate
        # alike.
        for repeat in range(s.verify_repeats):
            median_s = self._median_trial_s(study) or 0.0
            elapsed = time.monotonic() - self.started
            if repeat > 0 and s.max_wall_s > 0 and elapsed + median_s * len(cands) > s.max_wall_s:
                log.warning(
                    "wall budget (%.0f s): verification stops after %d fresh round(s)",
                    s.max_wall_s,
                    repeat,
                )
                break
            batch = [c.overrides for c in cands.values()]
            returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            self.job_idx += len(batch)
            for number, ret in zip(cands, returns, strict=True):
                out = self._job_output(ret)
                self.tracker.log_trial(
                    number=number,
                    state=out["state"],
                    reason=out.get("reason"),
                    params=space.point(cands[number].params),
                    result=out.get("result"),
                    job_dir=Path(out["job_dir"]) if out.get("job_dir") else None,
                    kind="verify",
                    repeat=repeat + 1,
                )
                if out["state"] == "complete":
                    cands[number].values.append(objective_value(out["result"], objective))
                    results[number].append(out["result"])
                else:
                    log.warning(
                        "verification run of trial %d: %s (%s)",
                        number,
                        out["state"],
                        out.get("reason"),
                    )
        measured = [c for c in cands.values() if c.values]
        if not measured:
            log.error("every verification run failed: no winner is exported")
            return [], None
        verdict = pick_winner(measured, direction=direction(objective), noise_floor=s.noise_floor)
        log.info("verdict: %s", verdict.reason)
        rows = []
        for number, c in cands.items():
            if not results[number]:
                continue
            row = verified_row(number, c, results[number], winner=c is verdict.winner)
            row.update(search_basis(study.trials[number]))
            row["start"] = base_trial is not None and number == base_trial.number
            rows.append(row)
        rows.sort(key=lambda r: r["tokens_per_s"], reverse=True)
        winner_number = next(n for n, c in cands.items() if c is verdict.winner)
        run_id = study.trials[winner_number].user_attrs.get("mlflow_run_id")
        if run_id:
            self.tracker.tag_winner(run_id)
        study.set_user_attr(
            "verdict",
            {"winner_trial": winner_number, "reason": verdict.reason, "decisive": verdict.decisive},
        )
        return rows, {
            "number": winner_number,
            "candidate": verdict.winner,
            "verdict": verdict,
            "results": results[winner_number],
            "trial": study.trials[winner_number],
        }

    # -- export ---------------------------------------------------------------------------------
    def _export(self, winner, sweep_dir, study_name, storage, rows) -> Path:
        trial = winner["trial"]
        job_dir = Path(trial.user_attrs["job_dir"])
        pinned = OmegaConf.to_container(OmegaConf.load(job_dir / "trial_config.yaml"))
        pinned.pop("defaults", None)
        planned, measured = self.s.planned_checkpoint_every, pinned["checkpoint"]["every_steps"]
        if planned > 0 and measured != planned:
            # the trial saved often to measure a save; production saves at the planned interval
            log.info("best.yaml saves every %d steps (hydra.sweeper.planned_checkpoint_every; "
                     "the trial saved every %d)", planned, measured)
            pinned["checkpoint"]["every_steps"] = planned
        row = next(r for r in rows if r["trial"] == winner["number"])
        path = sweep_dir / "best.yaml"
        doc = best_config_document(
            trainer_config=pinned,
            metrics={k: v for k, v in row.items() if k not in ("params",)},
            fingerprint=winner["results"][-1].get("fingerprint", {}),
            command=train_command(path),
            sweep={
                "study": study_name,
                "storage": mask_url(storage),
                "trial": winner["number"],
                "verdict": winner["verdict"].reason,
                "decisive": winner["verdict"].decisive,
            },
        )
        header = (
            f"Tuned by the throughput sweep (study {study_name}, trial {winner['number']}): "
            f"{row['tokens_per_s']:,.0f} tokens/s median of {row['n']} fresh runs, "
            f"CV {100 * row['cv']:.1f}%.\nTrain with it: {train_command(path)}"
        )
        write_best_yaml(path, doc, header=header)
        return path

    def _plots_and_best(self, study, sweep_dir: Path, best_path: Path, rows, winner) -> None:
        """Optuna's HTML views and the PNG summary, then best.yaml and them on the parent run."""
        from sweeper.plots import optuna_html, summary_png

        artifacts: list[Path] = []
        try:
            artifacts += optuna_html(study, sweep_dir / "plots")
            trials = [
                {
                    "params": t.params,
                    "tokens_per_s": (t.user_attrs.get("metrics") or {}).get("tokens_per_s"),
                    "state": t.state.name.lower(),
                }
                for t in study.get_trials(deepcopy=False)
            ]
            artifacts.append(
                summary_png(
                    plot_rows(rows, self.verify_results),
                    trials,
                    sweep_dir / "plots" / "summary.png",
                )
            )
        except Exception as exc:
            log.warning("could not draw the sweep plots: %s", exc)
        row = next(r for r in rows if r["winner"])
        verdict = winner["verdict"]
        self.tracker.log_best(
            best_yaml=best_path,
            extra_artifacts=artifacts,
            metrics={
                "best/tokens_per_s": row["tokens_per_s"],
                "best/cv": row["cv"],
                "best/step_s_p50": row["step_time_s"],
                "best/mfu_spec": row["mfu_spec"],
                "best/mfu_ceiling": row["mfu_ceiling"],
                "best/data_wait_frac": row["data_wait_frac"],
            },
            tags={
                "verdict": verdict.reason,
                "decisive": verdict.decisive,
                "winner_trial": winner["number"],
            },
        )

    def _explain(self, study, winner) -> None:
        """The bottleneck verdict for the winner and for the starting config, side by side."""
        from train.explain.diagnosis import diagnose

        s = self.s
        win_result = winner["results"][-1]
        lines = []
        tags: dict[str, Any] = {}
        metrics: dict[str, float] = {}
        base_trial = find_baseline(study, self.baseline)
        base_result = read_result(base_trial) if base_trial is not None else None
        win_median = statistics.median(r["tokens_per_s"] for r in winner["results"])
        gain = ""
        start_won = base_trial is not None and base_trial.number == winner["number"]
        if base_result is not None and base_result.get("tokens_per_s"):
            # Like with like: the starting config's verified median (real full steps, the same
            # rounds as the winner's) when it was re-measured, and a speedup of 1 by definition
            # when it is the winner.
            base_runs = self.verify_results.get(base_trial.number) or []
            base_tps = [r["tokens_per_s"] for r in base_runs if r and r.get("tokens_per_s")]
            base_value = statistics.median(base_tps) if base_tps else base_result["tokens_per_s"]
            real = [r for r in base_runs if r and r.get("tokens_per_s")]
            d = diagnose(real[-1] if real else base_result, planned_steps=s.planned_steps)
            lines.append(
                f"starting config (trial {base_trial.number}): "
                f"{measured_text(base_value, base_tps)} (search run {search_text(base_result)}); "
                f"{d.headline}"
            )
            tags["verdict.default"] = d.headline
            speedup = 1.0 if start_won else win_median / base_value
            metrics["best/speedup_vs_default"] = speedup
            basis = "its verified median" if base_tps else "its search run"
            gain = f" ({speedup:.2f}x the start, against {basis})"
        d = diagnose(win_result, planned_steps=s.planned_steps)
        if start_won:
            gain = " (the starting config: nothing searched beat it beyond the noise)"
        win_search = read_result(winner["trial"]) or {}
        lines.append(
            f"winner (trial {winner['number']}): {win_median:,.0f} tokens/s (verified median, "
            f"real full steps; search run {search_text(win_search)}){gain}; {d.headline}"
        )
        for fix in d.fixes[:3]:
            gain_x = fix.expected_gain
            bound = "gain unknown" if gain_x is None else f"up to {gain_x:.2f}x"
            tried = tried_in_study(study, fix.fix)
            seen = (
                f"; tried in this sweep: best {tried:,.0f} tokens/s, {tried / win_median:.2f}x "
                "the winner"
                if tried
                else ""
            )
            lines.append(f"  next: {fix.fix}: {bound} ({fix.basis}{seen})")
        tags["verdict.winner"] = d.headline
        for line in lines:
            report.console.print(line)
        self.tracker.log_best(best_yaml=None, extra_artifacts=[], metrics=metrics, tags=tags)

    def _final_report(self, rows, best_path, study) -> None:
        states: dict[str, int] = {}
        for t in study.get_trials(deepcopy=False):
            if DUPLICATE_ATTR in t.user_attrs:
                name = "duplicate (not re-run)"
            else:
                name = t.user_attrs.get("failure_kind") or t.state.name.lower()
            states[name] = states.get(name, 0) + 1
        report.console.print("trials: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
        if rows:
            report.console.print(report.final_table(rows, title="Verified top configurations"))
        if best_path is not None:
            report.console.print(f"best config: {best_path}")
            report.console.print(f"train with:  {train_command(best_path)}")


def tried_in_study(study: optuna.Study, suggestion: str) -> float | None:
    """The best tokens/s any measured trial got with every `key=value` of `suggestion` that the
    study searched (None when it tried none): evidence beside an arithmetic bound."""
    wanted = dict(re.findall(r"([\w.]+)=(\S+)", suggestion))
    searched = {k for t in study.get_trials(deepcopy=False) for k in t.params}
    wanted = {k: v for k, v in wanted.items() if k in searched}
    if not wanted:
        return None
    best = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        tps = (t.user_attrs.get("metrics") or {}).get("tokens_per_s")
        if tps and all(str(t.params.get(k)).lower() == v.lower() for k, v in wanted.items()):
            best = tps if best is None else max(best, tps)
    return best


def find_baseline(study: optuna.Study, params: dict | None):
    """The completed trial that measured the starting config, if any."""
    if params is None:
        return None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("baseline") or t.params == params:
            return t
    return None


def measured_text(value: float, verified: list[float]) -> str:
    if verified:
        return f"{value:,.0f} tokens/s (verified median of {len(verified)}, real full steps)"
    return f"{value:,.0f} tokens/s (its search run only: no verification run completed)"


def search_text(result: dict) -> str:
    """A search run's tokens/s, saying whether it was projected from short steps."""
    tps = result.get("tokens_per_s")
    if tps is None:
        return "n/a"
    proj = result.get("projection")
    if proj:
        return (f"{tps:,.0f} tokens/s projected from steps of {proj['micro_batches_per_step']} of "
                f"{proj['grad_accum']} micro-batches")
    return f"{tps:,.0f} tokens/s"


def search_basis(trial) -> dict:
    """What the search measured for a trial: its tokens/s and whether it was projected from
    short steps (train/trial/measurement.py), to print beside the verified real full steps."""
    result = read_result(trial) or {}
    return {
        "search_tokens_per_s": result.get("tokens_per_s"),
        "search_projected": result.get("projection") is not None,
    }


def read_result(trial) -> dict | None:
    job_dir = trial.user_attrs.get("job_dir")
    path = Path(job_dir) / "result.json" if job_dir else None
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text())


def queue_grid(study: optuna.Study, points: list[dict]) -> int:
    """Queue each grid point the study has not seen yet (a resumed grid queues only the rest)."""
    seen = {json.dumps(t.params, sort_keys=True, default=str) for t in study.get_trials()}
    fresh = [p for p in points if json.dumps(p, sort_keys=True, default=str) not in seen]
    for p in fresh:
        study.enqueue_trial(p)
    return len(fresh)


def make_tracker(s, *, experiment: str):
    from sweeper.tracking import NullTracker, SweepTracker

    if not s.mlflow:
        return NullTracker()
    return SweepTracker(
        tracking_uri=s.mlflow_tracking_uri or None,
        experiment=experiment,
        artifact_location=s.mlflow_artifact_location or None,
    )


def git_commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True, check=False
    )
    return out.stdout.strip() if out.returncode == 0 else ""


def plot_rows(rows: list[dict], results: dict[int, list[dict]]) -> list[dict]:
    """Each verified config's step-time breakdown and its 100%-MFU floor, for the summary PNG."""
    out = []
    for r in rows:
        res = results[r["trial"]][-1]
        peak = (res.get("device") or {}).get("peak_flops")
        out.append(
            {
                "label": f"#{r['trial']}" + (" (winner)" if r["winner"] else ""),
                "step_time_s": r["step_time_s"],
                "time_frac": res["time_frac"],
                # floor = FLOPs per step / peak (train.measure.flops.floor_step_time_s; not imported
                # here: the sweeper never imports train's torch side)
                "floor_step_s": res["tokens_per_step"] * res["flops_per_token"] / peak
                if peak
                else None,
            }
        )
    return out


def summary_metrics(result: dict) -> dict:
    """The handful of numbers a trial is compared by (stored on the Optuna trial)."""
    st = result.get("step_time_s") or {}
    fr = result.get("time_frac") or {}
    mfu = result.get("mfu") or {}
    return {
        "tokens_per_s": result.get("tokens_per_s"),
        "step_time_p50_s": st.get("p50"),
        "step_time_cv": st.get("cv"),
        "mfu_spec": mfu.get("spec"),
        "mfu_ceiling": mfu.get("ceiling"),
        "data_wait_frac": fr.get("data_wait"),
        "compile_s": result.get("compile_s"),
        "warmup_s": result.get("warmup_s"),
    }


def verified_row(number: int, cand: Candidate, results: list[dict], *, winner: bool) -> dict:
    """Medians over a candidate's fresh runs, and the spread of its tokens/s."""
    tps = [r["tokens_per_s"] for r in results]
    mean = statistics.fmean(tps)
    cv = statistics.stdev(tps) / mean if len(tps) > 1 and mean > 0 else 0.0

    def med(fn):
        vals = [v for v in (fn(r) for r in results) if v is not None]
        return statistics.median(vals) if vals else None

    return {
        "trial": number,
        "winner": winner,
        "params": cand.params,
        "tokens_per_s": statistics.median(tps),
        "tokens_per_s_runs": tps,
        "cv": cv if math.isfinite(cv) else None,
        "n": len(tps),
        "step_time_s": med(lambda r: r["step_time_s"]["p50"]),
        "mfu_spec": med(lambda r: r["mfu"]["spec"]),
        "mfu_ceiling": med(lambda r: r["mfu"]["ceiling"]),
        "data_wait_frac": med(lambda r: r["time_frac"]["data_wait"]),
        "objective_median": statistics.median(cand.values),
    }
