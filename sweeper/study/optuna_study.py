"""The Optuna study: storage, sampler, pruner, and resuming a sweep that was killed.

The study is the source of truth. A sweep killed mid-trial leaves that trial RUNNING; on restart it
is marked FAIL ("interrupted") and its parameters are queued again, so no finished trial is lost and
none is repeated. A trial is known to be orphaned when the sweep process that owned it (recorded as
host and pid) is gone, or, for workers on other hosts, when its heartbeat went stale.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.masking import mask_secrets
from sweeper.study.owner import owner_alive, owner_tag
from train.core.pruning import PRUNER_ATTR
from train.core.result import read_result

log = logging.getLogger(__name__)

OWNER_ATTR = "throughput_sweep.owner"  # "host:pid" of the sweep process that asked for the trial
REQUEUED_ATTR = "throughput_sweep.requeued_from"
# A queued point the search never ran (its budget ended first) is failed with this failure_kind,
# so no trial is left WAITING; a later sweep on the study queues it again (`requeue_unrun`).
UNRUN = "unrun"
FAILURE_ATTRS = ("failure_kind", "failure_reason")
DUPLICATE_ATTR = "duplicate_of"  # trial number whose outcome a re-proposed point reuses
POLISH_ATTR = "polish_of"  # the best trial whose one-knob neighbour this queued point is
SAMPLERS = ("tpe", "random", "grid", "prior")
# samplers whose n_trials is their list of points (a grid's feasible points; the start and prior's)
LISTED_SAMPLERS = ("grid", "prior")
PRUNERS = ("median", "percentile", "none")


@dataclass(kw_only=True)
class StudySpec:
    storage: str  # an Optuna storage URL: sqlite:///path.db, postgresql://...
    study_name: str
    direction: str  # maximize | minimize
    sampler: str = "tpe"
    pruner: str = "median"
    n_startup_trials: int = 4  # trials before TPE models and before the pruner judges
    pruner_warmup_steps: int = 5  # measured steps before a trial can be pruned
    pruner_startup_trials: int = 2  # finished trials before the pruner judges any
    seed: int = 0
    heartbeat_interval_s: int = 10


def pruner_spec(spec: StudySpec) -> dict:
    """The pruner as data, stored on the study so trial processes rebuild the very same pruner."""
    if spec.pruner == "none":
        return {"name": "NopPruner", "kwargs": {}}
    kwargs = {
        "n_startup_trials": spec.pruner_startup_trials,
        "n_warmup_steps": spec.pruner_warmup_steps,
    }
    if spec.pruner == "median":
        return {"name": "MedianPruner", "kwargs": kwargs}
    if spec.pruner == "percentile":
        return {"name": "PercentilePruner", "kwargs": {"percentile": 25.0, **kwargs}}
    raise ValueError(f"hydra.sweeper.pruner.kind must be one of {PRUNERS}, got {spec.pruner!r}")


def make_sampler(spec: StudySpec, *, grid: dict | None = None) -> optuna.samplers.BaseSampler:
    if spec.sampler == "tpe":
        return optuna.samplers.TPESampler(
            seed=sampler_seed(spec.seed),
            n_startup_trials=spec.n_startup_trials,
            multivariate=True,
        )
    if spec.sampler in ("random", "prior"):  # prior: every point is queued, none is drawn
        return optuna.samplers.RandomSampler(seed=sampler_seed(spec.seed))
    if spec.sampler == "grid":
        if not grid:
            raise ValueError("hydra.sweeper.sampler=grid needs a finite search space")
        return optuna.samplers.GridSampler(grid, seed=sampler_seed(spec.seed))
    raise ValueError(f"hydra.sweeper.sampler must be one of {SAMPLERS}, got {spec.sampler!r}")


def make_storage(url: str, *, heartbeat_interval_s: int) -> optuna.storages.BaseStorage:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True, exist_ok=True)
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(3):
        try:
            return optuna.storages.RDBStorage(
                url,
                heartbeat_interval=heartbeat_interval_s,
                grace_period=3 * heartbeat_interval_s,
                # SQLite under several writers: wait for the lock rather than fail.
                engine_kwargs={"connect_args": {"timeout": 60}}
                if url.startswith("sqlite")
                else None,
            )
        except (IntegrityError, OperationalError) as e:
            # Two processes opening a fresh database at the same moment (workers, or a dashboard
            # reading the study) race to create Optuna's tables: PostgreSQL's loser gets an
            # IntegrityError, SQLite's "table ... already exists"; it finds them made on the next
            # try. Any other OperationalError (a locked or unreadable file) is not a race.
            lost_race = isinstance(e, IntegrityError) or "already exists" in str(e)
            if not lost_race or attempt == 2:
                raise
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def sampler_seed(seed: int) -> int:
    """A fixed seed (>= 0) as given; -1 derives one from host and pid, so that several workers on
    one study explore different points instead of the same sequence."""
    if seed >= 0:
        return seed
    return zlib.crc32(owner_tag().encode()) % 2**31


def open_study(spec: StudySpec, *, grid: dict | None = None) -> optuna.Study:
    """Create the study, or load it to resume; a different direction is a user error."""
    storage = make_storage(spec.storage, heartbeat_interval_s=spec.heartbeat_interval_s)
    # Optuna warns that heartbeats are meant for optimize(); this ask/tell loop records them itself
    # (see `heartbeats`), so the warning does not apply.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    study = optuna.create_study(
        storage=storage,
        study_name=spec.study_name,
        direction=spec.direction,
        sampler=make_sampler(spec, grid=grid),
        load_if_exists=True,
    )
    if study.direction.name.lower() != spec.direction:
        raise ValueError(
            f"study {spec.study_name!r} in {mask_secrets(spec.storage)} optimizes "
            f"{study.direction.name.lower()}, but the objective asks to {spec.direction}; "
            f"use another hydra.sweeper.study_name"
        )
    study.set_user_attr(PRUNER_ATTR, pruner_spec(spec))
    return study


# -- Optuna's private storage API, in one place ---------------------------------------------------
# Checked against optuna 5.0.0. Optuna keeps heartbeats to optimize() and does not surface a trial's
# storage id; an ask/tell sweep whose trials run in other processes needs both: the trial process
# reports intermediate values to the storage by id, the sweep records heartbeats for the trials it
# runs, reads which heartbeats went stale, and sets the failure attributes of a trial that another
# (dead) process asked for, for which no public `Trial` object exists here.


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The trial's id in the storage (unique across studies, unlike its number)."""
    return trial._trial_id


def stale_trial_ids(study: optuna.Study) -> set[int]:
    """Storage ids of RUNNING trials whose heartbeat went stale (RDBStorage's heartbeat API)."""
    return set(study._storage._get_stale_trial_ids(study._study_id))


def set_trial_user_attr(study: optuna.Study, trial: FrozenTrial, key: str, value: object) -> None:
    """Set a user attribute on a trial this process holds no `Trial` object for."""
    study._storage.set_trial_user_attr(trial._trial_id, key, value)


def _record_heartbeat(study: optuna.Study, trial: optuna.Trial | FrozenTrial) -> None:
    study._storage.record_heartbeat(trial._trial_id)


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The study's storage object, to open other studies in it without a second engine."""
    return study._storage


def _fail_queued(study: optuna.Study, trial: FrozenTrial) -> None:
    """Move a WAITING trial to FAIL (`study.tell` refuses a trial that was never asked)."""
    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


# -------------------------------------------------------------------------------------------------


def running_trials(study: optuna.Study) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """The RUNNING trials as (live, orphaned). An orphan's owner process on this host is gone, or,
    when this host cannot tell (another host, or a pid that may be reused), its heartbeat is
    stale."""
    stale_ids = stale_trial_ids(study)
    live, orphaned = [], []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        alive = owner_alive(t.user_attrs.get(OWNER_ATTR))
        holds = alive is True or (alive is None and trial_id(t) not in stale_ids)
        (live if holds else orphaned).append(t)
    return live, orphaned


def recover_interrupted(study: optuna.Study) -> list[int]:
    """Fail orphaned RUNNING trials, queue their parameters again, and return their numbers."""
    requeued = []
    for t in running_trials(study)[1]:
        fail_and_requeue(study, t, reason="the sweep process stopped while this trial ran")
        requeued.append(t.number)
        log.warning("trial %d was interrupted by a stopped sweep; queued again", t.number)
    return requeued


@contextlib.contextmanager
def heartbeats(study: optuna.Study, trials: list, *, interval_s: float) -> Iterator[None]:
    """Record a heartbeat for each running trial while its job runs, so workers on other hosts can
    tell a live trial from one whose sweep died (RDBStorage's heartbeat, as optimize() keeps it)."""
    stop = threading.Event()

    def beat() -> None:
        while True:
            for t in list(trials):  # the caller adds and removes trials as their jobs run
                with contextlib.suppress(Exception):  # a missed beat only delays recovery
                    _record_heartbeat(study, t)
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=beat, name="optuna-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def is_own_outcome(trial: FrozenTrial) -> bool:
    """A finished trial whose outcome is its own: not an interrupted or unrun trial (it is queued
    again) nor a duplicate (it ran nothing and reuses its twin's outcome)."""
    return (
        trial.user_attrs.get("failure_kind") not in ("interrupted", UNRUN)
        and DUPLICATE_ATTR not in trial.user_attrs
    )


def own_outcomes(study: optuna.Study) -> list[FrozenTrial]:
    """The finished trials with an outcome of their own (`is_own_outcome`)."""
    return [t for t in study.get_trials(deepcopy=False, states=FINISHED) if is_own_outcome(t)]


def count_finished(study: optuna.Study) -> int:
    """Trials that count against the budget: every finished state, failures included, that has
    an outcome of its own."""
    return len(own_outcomes(study))


def find_twin(study: optuna.Study, params: dict, *, number: int) -> FrozenTrial | None:
    """The earliest finished trial (not `number`) that measured exactly `params`: samplers
    re-propose points in small discrete spaces, and a re-run would spend a trial's time to learn
    what the study already knows (verification re-measures the contenders anyway)."""
    return next((t for t in own_outcomes(study) if t.number != number and t.params == params), None)


def planned_params(trial: FrozenTrial) -> dict:
    """A trial's point: its params, or for a queued (WAITING) trial the params it will get
    (Optuna keeps those as the `fixed_params` system attr until the trial is asked)."""
    return trial.params or dict(trial.system_attrs.get("fixed_params") or {})


def find_running_twin(study: optuna.Study, params: dict, *, number: int) -> FrozenTrial | None:
    """A live RUNNING trial (not `number`) at exactly `params`: with parallel trials, or workers
    sharing the study, a sampler may re-propose a point that is being measured right now."""
    live, _ = running_trials(study)
    return next((t for t in live if t.number != number and t.params == params), None)


def fail_own_running(study: optuna.Study, *, reason: str) -> list[int]:
    """Fail this process's RUNNING trials as interrupted (Ctrl-C or SIGTERM stopped the sweep);
    a resumed sweep asks their points again."""
    mine, stopped = owner_tag(), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get(OWNER_ATTR) != mine:
            continue
        with contextlib.suppress(Exception):  # already told by a racing thread
            fail_and_requeue(study, t, reason=reason)
            stopped.append(t.number)
    return stopped


def fail_and_requeue(study: optuna.Study, t: FrozenTrial, *, reason: str) -> None:
    """Record `t` as an interrupted FAIL and queue its point again, so no asked point is lost."""
    set_trial_user_attr(study, t, "failure_kind", "interrupted")
    set_trial_user_attr(study, t, "failure_reason", reason)
    study.tell(t.number, state=TrialState.FAIL)
    study.enqueue_trial(t.params, user_attrs={REQUEUED_ATTR: t.number})


def fail_waiting(study: optuna.Study, *, reason: str) -> list[int]:
    """Fail the study's queued (WAITING) trials as unrun, with `reason`: the search is over, so
    none is left waiting; `requeue_unrun` queues their points again when the study resumes."""
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        with contextlib.suppress(Exception):  # another worker ending at once failed it first
            set_trial_user_attr(study, t, "failure_kind", UNRUN)
            set_trial_user_attr(study, t, "failure_reason", reason)
            _fail_queued(study, t)
            failed.append(t.number)
    return failed


def requeue_unrun(study: optuna.Study) -> list[int]:
    """Queue again the points of unrun trials that no later trial took up (a grid queues its
    unseen points itself), with their own marks (baseline, design, polish); their numbers."""
    trials = study.get_trials(deepcopy=False)
    taken = {t.user_attrs.get(REQUEUED_ATTR) for t in trials}
    waiting = [planned_params(t) for t in trials if t.state == TrialState.WAITING]
    requeued = []
    for t in trials:
        point = planned_params(t)
        if t.user_attrs.get("failure_kind") != UNRUN or t.number in taken or point in waiting:
            continue
        marks = {k: v for k, v in t.user_attrs.items() if k not in FAILURE_ATTRS}
        study.enqueue_trial(point, user_attrs={**marks, REQUEUED_ATTR: t.number})
        waiting.append(point)
        requeued.append(t.number)
    if requeued:
        log.info("queued again the point(s) of unrun trial(s) %s", ", ".join(map(str, requeued)))
    return requeued


def trial_result(trial: FrozenTrial) -> dict | None:
    """The search run's result.json of `trial`, if its job left one."""
    job_dir = trial.user_attrs.get("job_dir")
    return read_result(Path(job_dir) / "result.json") if job_dir else None


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """No "A new study created" line for a marker study (a claim, a lock): bookkeeping, not a
    study."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)
