"""Which worker of a shared study verifies and exports the study's best.

Workers share a study by its storage and name (README, "Scale out"). Each one searches; the study's
best is verified and exported once, from the study's completed trials whoever ran them, by the last
worker to end its search:

- a worker whose search ends while trials of another worker still run leaves the export to that
  worker, and says which sweep dir will hold the best.yaml;
- workers that end together claim the export. The claim is a marker study `<study>.export-claim`:
  the database refuses a second study of one name (a unique key, on SQLite and PostgreSQL alike),
  so exactly one claim wins; optuna has no compare-and-set on attributes. The winner verifies,
  exports, records the export on the study (EXPORT_ATTR: the file and the trials it compared) and
  deletes the claim; the others name the winner's best.yaml. An export of the same trials that a
  worker finds made while it ran is named, not repeated; one made before it started is not (the
  same command run again on a finished study verifies and exports again, into its own sweep dir).

A claim whose owner died on this host is taken over; an interrupted export releases its claim.
A claim not won and a deferral carry who exports and where as data; sweeper/report/claim_text.py
says them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.study import marker
from sweeper.study.optuna_study import (
    OWNER_ATTR,
    own_outcomes,
    running_trials,
    storage_of,
)
from sweeper.study.owner import owner_alive, owner_tag

log = logging.getLogger(__name__)

EXPORT_ATTR = "export"  # {best_yaml, owner, compared, when}: the study's last export
WORKER_PREFIX = "worker:"  # worker:<host:pid> -> its sweep dir
CLAIM_SUFFIX = ".export-claim"
HOLDER_WAIT_S = 5.0  # a fresh claim names its holder within moments of being made
# How a claim ended: won (ours), held by a live worker, the same trials exported already while this
# worker ran, or lost in a takeover race.
ClaimKind = Literal["ours", "held", "exported", "raced"]


def register_worker(study: optuna.Study, sweep_dir: Path) -> None:
    """Record this worker's sweep dir, so the others can say where its best.yaml will be."""
    study.set_user_attr(f"{WORKER_PREFIX}{owner_tag()}", str(sweep_dir))


def best_yaml_of(study: optuna.Study, owner: str) -> str | None:
    """Where the worker `owner` writes its best.yaml (its sweep dir's); None where it never said."""
    sweep_dir = study.user_attrs.get(f"{WORKER_PREFIX}{owner}")
    return f"{sweep_dir}/best.yaml" if sweep_dir else None


def compared_trials(study: optuna.Study) -> list[int]:
    """The completed trials an export compares: every worker's, duplicates left out."""
    return [t.number for t in own_outcomes(study) if t.state == TrialState.COMPLETE]


def comparison(study: optuna.Study, rows: list[dict]) -> dict:
    """What an export compared, for best.yaml's provenance: the study's completed trials, the
    workers that ran them, and the contenders verification raced (`rows`)."""
    trials = [t for t in own_outcomes(study) if t.state == TrialState.COMPLETE]
    return {
        "trials": [t.number for t in trials],
        "workers": sorted({str(t.user_attrs.get(OWNER_ATTR, "?")) for t in trials}),
        "raced": sorted(r["trial"] for r in rows),
    }


def others_running(study: optuna.Study) -> list[FrozenTrial]:
    """Live trials of other workers on this study (orphans of dead workers do not count)."""
    me = owner_tag()
    return [t for t in running_trials(study)[0] if t.user_attrs.get(OWNER_ATTR) != me]


@dataclass(frozen=True, kw_only=True)
class Deferral:
    """This worker's search ended while other workers still run trials of the shared study."""

    study: str  # the study's name
    trials: list[int]  # the trials still running
    owners: list[str]  # the workers running them, sorted
    best_yamls: list[str | None]  # each owner's best.yaml (best_yaml_of), in `owners`' order


def deferral(study: optuna.Study, running: list[FrozenTrial]) -> Deferral:
    """Who exports the study's best, and where, once the workers running `running` finish."""
    owners = sorted({str(t.user_attrs.get(OWNER_ATTR)) for t in running})
    return Deferral(
        study=study.study_name,
        trials=[t.number for t in running],
        owners=owners,
        best_yamls=[best_yaml_of(study, o) for o in owners],
    )


@dataclass(kw_only=True)
class Claim:
    """The outcome of claiming the export: `ours`, or `kind` with who holds it and which file."""

    ours: bool
    kind: ClaimKind = "ours"
    study: str = ""  # the study's name, when not ours
    holder: str | None = None  # held: the worker verifying; None where it never said
    best_yaml: str | None = None  # held: the holder's best.yaml (best_yaml_of); exported: the file
    compared: int = 0  # exported: the completed trials it compared
    name: str = ""  # the claim study's name, when ours

    def release(self, study: optuna.Study) -> None:
        if self.ours:
            marker.release(self.name, storage_of(study))


def claim_export(
    study: optuna.Study, *, sweep_dir: Path, compared: list[int], since: float = 0.0
) -> Claim:
    """Claim the export of the study's best (module doc); a claim not won names the file that
    holds, or will hold, the study's best. `since`: this worker's start (time.time())."""
    done = _exported(study, compared, since)
    if done is not None:
        return done
    name = f"{study.study_name}{CLAIM_SUFFIX}"
    storage = storage_of(study)
    for _ in range(2):  # a second try after taking over a dead holder's claim
        claim = marker.take(name, storage)
        if claim is None:
            holder = _holder(name, storage)
            if holder is None or owner_alive(holder) is not False:
                return Claim(
                    ours=False,
                    kind="held",
                    study=study.study_name,
                    holder=holder,
                    best_yaml=None if holder is None else best_yaml_of(study, holder),
                )
            log.warning("the export claim of %s died with its worker; taking it over", holder)
            marker.release(name, storage)
            continue
        claim.set_user_attr("sweep_dir", str(sweep_dir))
        done = _exported(study, compared, since)  # exported since the first look
        if done is not None:
            Claim(ours=True, name=name).release(study)
            return done
        return Claim(ours=True, name=name)
    return Claim(ours=False, kind="raced", study=study.study_name)


def record_export(study: optuna.Study, *, best_yaml: Path, compared: list[int]) -> None:
    """Say on the study which file holds its best and which trials it compared."""
    study.set_user_attr(
        EXPORT_ATTR,
        {
            "best_yaml": str(best_yaml),
            "owner": owner_tag(),
            "compared": compared,
            "when": time.time(),
        },
    )


def _exported(study: optuna.Study, compared: list[int], since: float) -> Claim | None:
    """A claim not won when another worker exported the study's best over exactly `compared`
    while this one ran (since `since`)."""
    done = study.user_attrs.get(EXPORT_ATTR)
    if not done or done.get("compared") != compared or done.get("when", 0.0) < since:
        return None
    return Claim(
        ours=False,
        kind="exported",
        study=study.study_name,
        best_yaml=str(done["best_yaml"]),
        compared=len(compared),
    )


def _holder(name: str, storage: optuna.storages.BaseStorage) -> str | None:
    """The owner of the claim `name`, waiting a moment for a fresh claim to say it."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        owner = marker.holder(name, storage)
        if owner:
            return owner
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)
