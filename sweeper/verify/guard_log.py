"""The numerics guard's runs in MLflow: each curve run a nested run of the sweep (kind `guard`),
its loss by step as the metric `guard/loss` (a candidate's run holds the reference's curve too, as
`guard/reference_loss`, so one chart shows both), its verdict and reason as tags; the tolerance's
derivation is a tag of the sweep's run. Tracking trouble is logged and never fails the sweep, as
in sweeper/tracking/mlflow_run.py, whose client this borrows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sweeper.tracking.protocol import Tracker, TrialLog
from sweeper.verify.guard_rules import Tolerance
from sweeper.verify.guard_text import tolerance_text

log = logging.getLogger(__name__)


def _client(tracker: Tracker) -> Any:
    """The MLflow client of a live SweepTracker; None when tracking is off or disabled."""
    if getattr(tracker, "disabled", True):
        return None
    return getattr(tracker, "_client", None)


def log_guard_run(
    tracker: Tracker,
    *,
    number: int,
    role: str,
    seed: int,
    out: Mapping[str, Any],
    params: Mapping[str, Any],
    curves: Mapping[str, Sequence[float] | None],
    tags: Mapping[str, Any],
    metrics: Mapping[str, float | None] | None = None,
) -> str | None:
    """One curve run as a nested MLflow run with its curves by step; its run id, or None."""
    run_id = tracker.log_trial(TrialLog.of_job(number, out, dict(params), kind="guard"))
    client = _client(tracker)
    if not run_id or client is None:
        return run_id
    try:
        from mlflow.entities import Metric, RunTag

        now_ms = int(time.time() * 1000)
        points = [
            Metric(name, float(v), now_ms, step)
            for name, curve in curves.items()
            for step, v in enumerate(curve or [])
        ]
        points += [
            Metric(k, float(v), now_ms, 0)
            for k, v in (metrics or {}).items()
            if isinstance(v, int | float)
        ]
        name = f"guard-{'ref' if role == 'reference' else f'{number:03d}'}-seed{seed}"
        run_tags = {"mlflow.runName": name, "guard.role": role, "guard.seed": seed, **tags}
        for i in range(0, len(points), 1000):
            client.log_batch(run_id, metrics=points[i : i + 1000])
        client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in run_tags.items()])
    except Exception as exc:  # by design: tracking trouble never stops a sweep
        log.warning("MLflow: the guard's curves of run %s were not logged: %s", run_id, exc)
    return run_id


def tag_sweep(tracker: Tracker, tol: Tolerance) -> None:
    """The tolerance and its derivation on the sweep's parent run."""
    client = _client(tracker)
    parent = getattr(tracker, "parent_run_id", None)
    if client is None or parent is None:
        return
    try:
        from mlflow.entities import Metric, RunTag

        client.log_batch(
            parent,
            metrics=[
                Metric("guard/tolerance", tol.value, int(time.time() * 1000), 0),
                Metric("guard/seed_spread", tol.spread, int(time.time() * 1000), 0),
            ],
            tags=[RunTag("guard.tolerance_derivation", tolerance_text(tol)[:5000])],
        )
    except Exception as exc:  # by design: tracking trouble never stops a sweep
        log.warning("MLflow: the guard's tolerance was not logged: %s", exc)
