"""The Optuna study: storage, sampler, pruner, and resuming a sweep that was killed.

The study is the source of truth. A sweep killed mid-trial leaves that trial RUNNING; on restart it
is
marked FAIL ("interrupted") and its parameters are queued again, so no finished trial is lost and
none
is repeated. A trial is known to be orphaned when the sweep process that owned it (recorded as host
and
pid) is gone, or, for workers on other hosts, when its heartbeat went stale.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from train.trial.pruning import PRUNER_ATTR

log = logging.getLogger(__name__)

OWNER_ATTR = "throughput_sweep.owner"  # "host:pid" of the sweep process that asked for the trial
REQUEUED_ATTR = "throughput_sweep.requeued_from"
DUPLICATE_ATTR = "duplicate_of"  # trial number whose outcome a re-proposed point reuses
SAMPLERS = ("tpe", "random", "grid")
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
    raise ValueError(f"hydra.sweeper.pruner must be one of {PRUNERS}, got {spec.pruner!r}")


def make_sampler(spec: StudySpec, *, grid: dict | None = None) -> optuna.samplers.BaseSampler:
    if spec.sampler == "tpe":
        return optuna.samplers.TPESampler(
            seed=sampler_seed(spec.seed),
            n_startup_trials=spec.n_startup_trials,
            multivariate=True,
        )
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=sampler_seed(spec.seed))
    if spec.sampler == "grid":
        if not grid:
            raise ValueError("hydra.sweeper.sampler=grid needs a finite search space")
        return optuna.samplers.GridSampler(grid, seed=sampler_seed(spec.seed))
    raise ValueError(f"hydra.sweeper.sampler must be one of {SAMPLERS}, got {spec.sampler!r}")


def make_storage(url: str, *, heartbeat_interval_s: int) -> optuna.storages.BaseStorage:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True, exist_ok=True)
    from sqlalchemy.exc import IntegrityError

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
        except IntegrityError:
            # Workers opening a fresh PostgreSQL database at the same moment race to create
            # Optuna's tables; the loser finds them made on the next try.
            if attempt == 2:
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
            f"study {spec.study_name!r} in {mask_url(spec.storage)} optimizes "
            f"{study.direction.name.lower()}, but the objective asks to {spec.direction}; "
            f"use another hydra.sweeper.study_name"
        )
    study.set_user_attr(PRUNER_ATTR, pruner_spec(spec))
    return study


def owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str | None) -> bool | None:
    """True/False for an owner on this host; None when it ran elsewhere (then heartbeats decide)."""
    if not owner or ":" not in owner:
        return None
    host, pid = owner.rsplit(":", 1)
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return int(pid) != os.getpid() or None


def recover_interrupted(study: optuna.Study) -> list[int]:
    """Fail orphaned RUNNING trials and queue their parameters again. Returns the requeued
    numbers."""
    # Optuna exposes heartbeats publicly only through optimize(); an ask/tell sweep reads them
    # through
    # the storage (RDBStorage's heartbeat API) and trial ids, which the public API does not surface.
    stale_ids = set(study._storage._get_stale_trial_ids(study._study_id))
    requeued = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        alive = _owner_alive(t.user_attrs.get(OWNER_ATTR))
        if alive is True or (alive is None and t._trial_id not in stale_ids):
            continue
        study._storage.set_trial_user_attr(t._trial_id, "failure_kind", "interrupted")
        study._storage.set_trial_user_attr(
            t._trial_id, "failure_reason", "the sweep process stopped while this trial ran"
        )
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={REQUEUED_ATTR: t.number})
        requeued.append(t.number)
        log.warning("trial %d was interrupted by a stopped sweep; queued again", t.number)
    return requeued


@contextlib.contextmanager
def heartbeats(study: optuna.Study, trials: list, *, interval_s: float) -> Iterator[None]:
    """Record a heartbeat for each running trial while its job runs, so workers on other hosts can
    tell a live trial from one whose sweep died (RDBStorage's heartbeat, as optimize() keeps it)."""
    storage = study._storage
    stop = threading.Event()

    def beat() -> None:
        while True:
            for t in trials:
                with contextlib.suppress(Exception):  # a missed beat only delays recovery
                    storage.record_heartbeat(t._trial_id)
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
    """A finished trial whose outcome is its own: not an interrupted trial (it is queued again)
    nor a duplicate (it ran nothing and reuses its twin's outcome)."""
    return (
        trial.user_attrs.get("failure_kind") != "interrupted"
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


def mask_url(url: str) -> str:
    """A storage/tracking URL with any password replaced, for logs and reports."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
