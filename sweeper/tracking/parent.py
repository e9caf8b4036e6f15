"""One parent run per sweep, across interruptions: which earlier parent run a starting sweep
continues.

A sweep stopped by Ctrl-C or SIGTERM closes its parent run KILLED (FAILED if it crashed); one
killed outright (SIGKILL, a lost node) leaves it RUNNING under a dead owner. The sweep that resumes
the study reopens that run, so its trials and the earlier ones sit under one parent. The study
records its parent run (user attr `mlflow_parent_run`), which finds the run even where the
experiment's name no longer matches; without it, the study's newest parent run in the experiment
is taken. A run a live process holds is never taken over, and a FINISHED run is never reopened: the
next sweep of a finished study is a sweep of its own.
"""

from __future__ import annotations

from typing import Any

from sweeper.masking import mask_secrets
from sweeper.study.owner import owner_alive
from sweeper.tracking.names import FINGERPRINT_TAG, SWEEP_OWNER_TAG

PARENT_ATTR = "mlflow_parent_run"  # study user attr: {"run_id", "tracking_uri"} of its parent run
REOPENED_STATUSES = ("KILLED", "FAILED")  # closed by a sweep that stopped before its end


def held(run: Any) -> bool:
    """Whether a live sweep may hold `run`: RUNNING under an owner that is alive, or that this
    host cannot check (another host, or a pid equal to ours)."""
    owner = run.data.tags.get(SWEEP_OWNER_TAG)
    return run.info.status == "RUNNING" and owner_alive(owner) is not False


def resumable(run: Any) -> bool:
    """A sweep run a stopped sweep left: closed KILLED or FAILED, or RUNNING under a dead owner."""
    if run.info.lifecycle_stage != "active" or run.data.tags.get("kind") != "sweep":
        return False
    return run.info.status in REOPENED_STATUSES or (run.info.status == "RUNNING" and not held(run))


def stored_parent(client: Any, study: Any, tracking_uri: str) -> Any:
    """The parent run the study recorded on this tracking store, if it still exists."""
    stored = (getattr(study, "user_attrs", None) or {}).get(PARENT_ATTR) or {}
    if not stored.get("run_id") or stored.get("tracking_uri") != mask_secrets(tracking_uri):
        return None
    try:
        return client.get_run(stored["run_id"])
    except Exception:  # deleted, or another store at the same URI: start a new parent
        return None


def newest_parent(client: Any, experiment_id: str, *, study: str, fingerprint: str | None) -> Any:
    """The newest sweep run of `study` (in that storage) that no live sweep holds; None if none."""
    where = f"tags.kind = 'sweep' and tags.study = '{study}'"
    if fingerprint:
        where += f" and tags.{FINGERPRINT_TAG} = '{fingerprint}'"
    runs = client.search_runs(
        [experiment_id],
        filter_string=where,
        order_by=["attributes.start_time DESC"],
        max_results=50,
    )
    return next((r for r in runs if not held(r)), None)


def parent_to_resume(
    client: Any,
    experiment_id: str,
    *,
    study: Any,
    study_name: str | None,
    fingerprint: str | None,
    tracking_uri: str,
) -> Any:
    """The earlier parent run this sweep continues, or None for a new one: the study's recorded
    parent, else the study's newest unheld parent run, when a stopped sweep left it."""
    stored = stored_parent(client, study, tracking_uri) if study is not None else None
    if stored is not None and resumable(stored):
        return stored
    if not study_name:
        return None
    run = newest_parent(client, experiment_id, study=study_name, fingerprint=fingerprint)
    return run if run is not None and resumable(run) else None


def record_parent(study: Any, run_id: str, tracking_uri: str) -> None:
    """Write the sweep's parent run into the study, for the sweep that resumes it."""
    if study is not None:
        study.set_user_attr(
            PARENT_ATTR, {"run_id": run_id, "tracking_uri": mask_secrets(tracking_uri)}
        )
