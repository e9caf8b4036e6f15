"""The start of a sweep: the Optuna study opened (or resumed) with its first points queued, and the
parent MLflow run.

Queued first, once per study: the starting config (so the report can say what changed and why),
then the prior's points (sweeper/plan/prior.py: where the memory model and the FLOP arithmetic
point, each with its reason), then the rest of TPE's startup points as a Latin-hypercube design
(sweeper/search/design.py), or every point of a grid.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import optuna

from sweeper.masking import mask_secrets
from sweeper.plan.calibration import PLAN_KEY_ATTR, STARTED_ATTR, plan_key
from sweeper.plan.prepare import Prepared
from sweeper.plan.prior import PRIOR_SAMPLERS, prior_points, prior_sampler_trials
from sweeper.report.prior_text import point_text, prior_line
from sweeper.search.design import latin_design
from sweeper.settings import SweepSettings
from sweeper.space.memory import past_ooms
from sweeper.space.search_space import SearchSpace, baseline_params
from sweeper.study.budget import resume_line
from sweeper.study.objective import direction, searched_interval_warning
from sweeper.study.optuna_study import (
    StudySpec,
    open_study,
    own_outcomes,
    recover_interrupted,
    requeue_unrun,
    sampler_seed,
)
from sweeper.tracking.mlflow_run import SweepTracker
from sweeper.tracking.names import experiment_name
from sweeper.tracking.protocol import NullTracker, Tracker
from train.core.keys import MODEL_NAME
from train.core.paths import PROJECT_DIR
from train.core.pruning import OBJECTIVE_ATTR

log = logging.getLogger(__name__)


DESIGN_ATTR = "design"  # a queued startup point of the Latin-hypercube design
PRIOR_ATTR = "prior"  # a queued point of the prior: its reason


@dataclass(frozen=True, kw_only=True)
class Started:
    """The opened study and what the rest of the sweep needs to know about it."""

    study: optuna.Study
    study_name: str
    storage: str
    # n_trials: a grid's is its number of points; the prior sampler's, the start and the prior's
    settings: SweepSettings
    baseline: dict | None  # the starting config's point, when the space holds it


def open_sweep_study(prepared: Prepared, sweep_dir: Path) -> Started:
    """Open or resume the study, queue its first points, and requeue interrupted trials."""
    p, s = prepared, prepared.settings
    sweep_dir.mkdir(parents=True, exist_ok=True)
    warning = searched_interval_warning(p.objective, {q.key for q in p.space.searched})
    if warning:
        log.warning(warning)
    storage = s.storage or f"sqlite:///{Path.cwd() / 'sweeps' / 'optuna.db'}"
    study_name = s.study_name or (
        f"throughput-{p.base[MODEL_NAME]}-{s.search_name}-{p.device.device_type}"
    )
    spec = StudySpec(
        storage=storage,
        study_name=study_name,
        direction=direction(p.objective),
        sampler=s.sampler,
        pruner=s.pruner.kind,
        n_startup_trials=s.n_startup_trials,
        pruner_warmup_steps=s.pruner.warmup_steps,
        pruner_startup_trials=s.pruner.startup_trials,
        seed=s.seed,
    )
    # A grid is every feasible point queued once in the study (Optuna's GridSampler stops the
    # study from inside tell(), which an ask/tell loop cannot take; queued points also resume).
    grid_points = p.space.grid_points(p.ctx) if s.sampler == "grid" else None
    if grid_points is not None:
        spec = dataclasses.replace(spec, sampler="random")
        if s.n_trials <= 0:
            s = dataclasses.replace(s, n_trials=len(grid_points))
    study = open_study(spec)
    check_same_space(study, s.space, search_name=s.search_name)
    if grid_points is not None:
        queue_grid(study, grid_points)
    # the child reports running tokens/s in these units (train/core/pruning.py)
    study.set_user_attr(
        OBJECTIVE_ATTR,
        {
            "name": p.objective.name,
            "planned_tokens": p.objective.planned_steps * p.ctx.tokens_per_step,
        },
    )
    p.ctx.note_ooms(past_ooms(own_outcomes(study), p.space))
    baseline = baseline_params(
        p.space, p.base, device_type=p.device.device_type, bf16=p.device.bf16_supported
    )
    if s.sampler == "prior":  # the starting config and the prior's points, nothing drawn
        n = prior_sampler_trials(
            p.space, p.ctx, start=baseline, enabled=s.prior, n_trials=s.n_trials
        )
        s = dataclasses.replace(s, n_trials=n)
    if (
        grid_points is None
        and baseline is not None
        and not any(t.user_attrs.get("baseline") for t in study.get_trials(deepcopy=False))
    ):
        # The starting config is measured first, so the report can say what changed and why.
        study.enqueue_trial(baseline, user_attrs={"baseline": True})
    if s.sampler in PRIOR_SAMPLERS:
        queued = queue_prior(study, p, baseline)
    if s.sampler == "tpe":
        queue_design(study, p.space, baseline, s, queued=queued)
    study.set_user_attr(SPACE_ATTR, {k: str(v) for k, v in s.space.items()})
    # where and when it ran: plan mode calibrates from finished sweeps of the same key
    study.set_user_attr(
        PLAN_KEY_ATTR,
        plan_key(model=str(p.base[MODEL_NAME]), search=s.search_name, device=p.device.name),
    )
    if STARTED_ATTR not in study.user_attrs:
        study.set_user_attr(STARTED_ATTR, time.time())
    recover_interrupted(study)
    requeue_unrun(study)  # the points an earlier sweep's budget ended before
    note_sweep_dir(study, sweep_dir)
    log.info("study %r in %s; sweep dir %s", study_name, mask_secrets(storage), sweep_dir)
    resumed = resume_line(study, s)
    if resumed:
        log.info("%s", resumed)
    return Started(
        study=study, study_name=study_name, storage=storage, settings=s, baseline=baseline
    )


SPACE_ATTR = "search_space"  # the study's searched keys and their ranges, as the sweep gave them


def check_same_space(study: optuna.Study, space: dict, *, search_name: str) -> None:
    """A study is searched over one space: resumed under another (another search preset, a knob
    added or a range changed), its trials' parameters no longer fit the sampler's distributions.
    Refused in one line naming the study, the difference and the fix, before the study is changed
    or a run is opened."""
    before = study.user_attrs.get(SPACE_ATTR)
    if not before or not study.get_trials(deepcopy=False):
        return
    now = {k: str(v) for k, v in space.items()}
    if before == now:
        return
    was = str(study.user_attrs.get(PLAN_KEY_ATTR, "")).split("|")
    preset = was[1] if len(was) == 3 else "?"
    changes = [
        f"{k} {before.get(k, 'not searched')} -> {now.get(k, 'not searched')}"
        for k in sorted(set(before) | set(now))
        if before.get(k) != now.get(k)
    ]
    shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
    raise ValueError(
        f"study {study.study_name!r} was searched with search={preset} over another space than "
        f"this sweep's (search={search_name}): {shown}; resume it with search={preset}, or give "
        f"this search its own study (hydra.sweeper.study_name=<new name>)"
    )


def queue_grid(study: optuna.Study, points: list[dict]) -> int:
    """Queue each grid point the study has not seen yet (a resumed grid queues only the rest)."""
    seen = {json.dumps(t.params, sort_keys=True, default=str) for t in study.get_trials()}
    fresh = [p for p in points if json.dumps(p, sort_keys=True, default=str) not in seen]
    for p in fresh:
        study.enqueue_trial(p)
    return len(fresh)


def queue_prior(study: optuna.Study, prepared: Prepared, baseline: dict | None) -> list[dict]:
    """The prior's points (sweeper/plan/prior.py), queued once per study after the starting
    config, each with its reason; the points queued (none on a resumed study)."""
    trials = study.get_trials(deepcopy=False)
    if any(t.user_attrs.get(PRIOR_ATTR) for t in trials) or len(trials) > 1:
        return []  # queued already, or a resumed study that is past its start
    prior = prior_points(
        prepared.space, prepared.ctx, start=baseline, enabled=prepared.settings.prior
    )
    s = prepared.settings
    room = s.n_trials - (baseline is not None) if s.n_trials > 0 else len(prior.points)
    points = prior.points[: max(0, room)]
    for prior_point in points:
        study.enqueue_trial(prior_point.params, user_attrs={PRIOR_ATTR: point_text(prior_point)})
    log.info("%s", prior_line(prior))
    for prior_point in points:
        log.info("  prior: %s", point_text(prior_point))
    return [prior_point.params for prior_point in points]


def queue_design(
    study: optuna.Study,
    space: SearchSpace,
    baseline: dict | None,
    settings: SweepSettings,
    *,
    queued: list[dict] | None = None,
) -> None:
    """TPE's startup trials as a Latin-hypercube design (sweeper/search/design.py), queued once per
    study, after the starting config and the prior's `queued` points (which count among them)."""
    s = settings
    trials = study.get_trials(deepcopy=False)
    if any(t.user_attrs.get(DESIGN_ATTR) for t in trials) or len(trials) > 1 + len(queued or []):
        return  # queued already, or a resumed study that is past its start
    first = [q for q in [baseline, *(queued or [])] if q is not None]
    n = s.n_startup_trials - len(first)
    if s.n_trials > 0:
        n = min(n, s.n_trials - len(first))
    points = latin_design(
        space.distributions(),
        max(0, n),
        seed=sampler_seed(s.seed),
        accept=lambda p: p not in first and space.check(p) is None,
    )
    for params in points:
        study.enqueue_trial(params, user_attrs={DESIGN_ATTR: True})
    if points:
        log.info("TPE starts from %d spread-out points (a Latin-hypercube design)", len(points))


def start_tracker(prepared: Prepared, started: Started, sweep_dir: Path) -> Tracker:
    """The MLflow tracker (a no-op one when hydra.sweeper.mlflow.enabled=false) with the sweep's
    parent run open: the settings as params, the device and the checkout as tags."""
    p, s, device = prepared, started.settings, prepared.device
    tracker: Tracker
    if not s.mlflow.enabled:
        tracker = NullTracker()
    else:
        tracker = SweepTracker(
            tracking_uri=s.mlflow.tracking_uri or None,
            # one experiment per study and storage: two studies of one name never share one
            experiment=s.mlflow.experiment or experiment_name(started.study_name, started.storage),
            artifact_location=s.mlflow.artifact_location or None,
        )
    tracker.start_sweep(
        run_name=f"sweep-{sweep_dir.parent.name}-{sweep_dir.name}",
        params={
            "search_space": json.dumps(s.space),
            "search_name": s.search_name,
            "sampler": s.sampler,
            "pruner.kind": s.pruner.kind,
            "objective": s.objective,
            "n_trials": s.n_trials,
            "verify.top_k": s.verify.top_k,
            "verify.repeats": s.verify.repeats,
            **{f"fixed.{o.split('=', 1)[0]}": o.split("=", 1)[1] for o in p.fixed},
        },
        tags={
            "study": started.study_name,
            "storage": mask_secrets(started.storage),
            "device": device.name
            if device.device_type == "cuda"
            else f"cpu ({device.cpu_count} cores)",
            "device_type": device.device_type,
            "torch": (p.facts or {}).get("torch", ""),
            "model": p.base[MODEL_NAME],
            "git_commit": _git_commit(),
            "sweep_dir": str(sweep_dir),
        },
        study=started.study,  # records the parent run; a resumed sweep reopens it
    )
    return tracker


def _git_commit() -> str:
    """The checkout's commit, for the sweep's provenance; empty outside a git checkout."""
    out = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True, check=False
    )
    return out.stdout.strip() if out.returncode == 0 else ""


SWEEP_DIR_ATTR = "sweep_dir"


def note_sweep_dir(study: optuna.Study, sweep_dir: Path) -> None:
    """Record the study's first sweep dir; a resume into another folder says where the earlier
    outputs are and how to keep one folder (hydra.sweep.dir=<that dir>)."""
    first = study.user_attrs.get(SWEEP_DIR_ATTR)
    if first is None:
        study.set_user_attr(SWEEP_DIR_ATTR, str(sweep_dir))
    elif Path(first) != sweep_dir:
        log.warning(
            "study %r has earlier outputs in %s; this run writes to %s (run with "
            "hydra.sweep.dir=%s to keep one study in one folder)",
            study.study_name,
            first,
            sweep_dir,
            first,
        )
