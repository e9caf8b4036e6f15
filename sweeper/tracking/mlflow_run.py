"""The MLflow tracker of a sweep: an experiment per study and storage, one parent run per sweep
(continued across interruptions: sweeper/tracking/parent.py), a nested run per trial.

Tracking is a convenience, never a dependency: the Optuna study and the sweep dir hold everything.
So every public method swallows its own errors, warns once, and turns the tracker into a no-op
for the rest of the sweep; a dead server costs seconds (small HTTP timeout, one retry), not minutes.

We use `MlflowClient` with explicit run ids (no fluent active-run state that a trial, a thread or a
library could disturb); nesting is the `mlflow.parentRunId` tag that the MLflow UI groups by.
mlflow is imported lazily: Hydra imports plugins at every start and the sweeper must stay light.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sweeper.launch.log_routing import adopt_library_logger
from sweeper.masking import mask_secrets
from sweeper.study.owner import owner_tag
from sweeper.tracking.names import (
    FINGERPRINT_TAG,
    INTERVAL_METRICS,
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_CHARS,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_CHARS,
    SWEEP_OWNER_TAG,
    cost_metrics,
    default_artifact_location,
    default_tracking_uri,
    final_metrics,
    is_remote,
    job_artifacts,
    run_status,
    storage_fingerprint,
    trial_run_name,
    truncate,
)
from sweeper.tracking.parent import parent_to_resume, record_parent
from sweeper.tracking.protocol import TrialLog

# one logger for the package: its warnings read as the tracker's wherever they come from
log = logging.getLogger("sweeper.tracking")

# Environment names from mlflow 3.17 mlflow/environment_variables.py (read at request time). The
# defaults (120 s timeout, 7 retries with exponential backoff) make a dead server cost ~4 minutes
# per request; ours cap the first failing request at ~timeout * (retries + 1) seconds.
HTTP_TIMEOUT_ENV = "MLFLOW_HTTP_REQUEST_TIMEOUT"
HTTP_RETRIES_ENV = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
HTTP_BACKOFF_ENV = "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"
# set_terminated otherwise re-reads the run (one more request) to print "View run" to stdout.
QUIET_URL_ENV = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"

T = TypeVar("T")


def _guarded(default: Any = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Run a public method with bounded HTTP settings and its time counted; on any error warn once
    and disable the tracker, so tracking trouble can never fail a sweep."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def guarded(self: SweepTracker, *args: Any, **kwargs: Any) -> T:
            if self.disabled:
                return default
            t0 = time.perf_counter()
            try:
                with self._http_limits():
                    return fn(self, *args, **kwargs)
            except Exception as e:  # by design: tracking trouble must never stop a sweep
                self._disable(f"{fn.__name__}: {type(e).__name__}: {e}")
                return default
            finally:
                self.overhead_s += time.perf_counter() - t0

        return guarded

    return wrap


class SweepTracker:
    """Mirrors a sweep into MLflow. Public methods never raise; see the module docstring."""

    def __init__(
        self,
        *,
        tracking_uri: str | None,
        experiment: str,
        artifact_location: str | None,
        request_timeout_s: int = 5,
        max_retries: int = 1,
    ) -> None:
        if not experiment:
            raise ValueError("experiment must be a non-empty MLflow experiment name, got ''")
        if request_timeout_s < 1:
            raise ValueError(f"request_timeout_s must be >= 1 (an int), got {request_timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.tracking_uri = tracking_uri or default_tracking_uri(Path.cwd())
        self.experiment = experiment
        if artifact_location is None and not is_remote(self.tracking_uri):
            artifact_location = default_artifact_location(Path.cwd(), experiment)
        # None for a server: it stores artifacts itself (proxied `mlflow-artifacts:/`), so the UI
        # can show them wherever the sweep ran.
        self.artifact_location = artifact_location
        self.request_timeout_s = request_timeout_s
        self.max_retries = max_retries
        self.disabled = False
        self.overhead_s = 0.0  # total seconds spent inside this tracker's public methods
        self.last_log_s: float | None = None  # seconds the last log_trial took
        self.parent_run_id: str | None = None
        self.experiment_id: str | None = None
        self._client: Any = None

    # -- plumbing -------------------------------------------------------------------------------
    @contextmanager
    def _http_limits(self) -> Iterator[None]:
        """Small timeout/retries for our own requests only; a user's explicit setting wins."""
        wanted = {
            HTTP_TIMEOUT_ENV: str(self.request_timeout_s),
            HTTP_RETRIES_ENV: str(self.max_retries),
            HTTP_BACKOFF_ENV: "0",
            QUIET_URL_ENV: "true",
        }
        added = [k for k in wanted if k not in os.environ]
        for k in added:
            os.environ[k] = wanted[k]
        try:
            yield
        finally:
            for k in added:
                os.environ.pop(k, None)

    def _disable(self, why: str) -> None:
        self.disabled = True
        log.warning(
            "MLflow tracking at %s failed (%s); tracking is off for the rest of this sweep. "
            "The Optuna study and the sweep dir still hold every trial and the result.",
            mask_secrets(self.tracking_uri),
            mask_secrets(why)[:500],
        )

    def _log_batch(self, run_id: str, *, metrics=(), params=None, tags=None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now_ms = int(time.time() * 1000)
        metric_objs = [Metric(k, v, now_ms, step) for k, v, step in metrics]
        pts = [Param(k, truncate(v, MAX_PARAM_CHARS)) for k, v in (params or {}).items()]
        pts += [RunTag(k, truncate(v, MAX_TAG_CHARS)) for k, v in (tags or {}).items()]
        for i in range(0, len(pts), MAX_PARAMS_TAGS_PER_BATCH):
            chunk = pts[i : i + MAX_PARAMS_TAGS_PER_BATCH]
            self._client.log_batch(
                run_id,
                params=[p for p in chunk if isinstance(p, Param)],
                tags=[t for t in chunk if isinstance(t, RunTag)],
            )
        for i in range(0, len(metric_objs), MAX_METRICS_PER_BATCH):
            self._client.log_batch(run_id, metrics=metric_objs[i : i + MAX_METRICS_PER_BATCH])

    # -- public API -----------------------------------------------------------------------------
    @_guarded()
    def start_sweep(self, *, run_name: str, params: dict, tags: dict, study: Any = None) -> None:
        """Open the experiment and the parent run: the one a stopped sweep of this study left
        (sweeper/tracking/parent.py), reopened, or a new one. `study`, when given, records it."""
        from mlflow.tracking import MlflowClient

        adopt_library_logger("mlflow")  # its INFO lines go to the sweep's log file only
        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        fingerprint = storage_fingerprint(tags["storage"]) if tags.get("storage") else None
        tags = {**tags, **({FINGERPRINT_TAG: fingerprint} if fingerprint else {})}
        self.experiment_id = self._open_experiment(tags)
        previous = parent_to_resume(
            self._client,
            self.experiment_id,
            study=study,
            study_name=tags.get("study"),
            fingerprint=fingerprint,
            tracking_uri=self.tracking_uri,
        )
        owner = owner_tag()
        if previous is not None:
            # Params are immutable in MLflow, so the first sweep's stay; tags (ours) are updated.
            self.parent_run_id = previous.info.run_id
            self.experiment_id = previous.info.experiment_id
            count = int(previous.data.tags.get("resumed", "0")) + 1
            self._client.update_run(self.parent_run_id, status="RUNNING")
            tags = {**tags, "resumed": str(count), SWEEP_OWNER_TAG: owner}
            self._log_batch(self.parent_run_id, tags=tags)
            log.info(
                "MLflow: continuing the stopped sweep's run %s (%s before)",
                self.parent_run_id,
                previous.info.status,
            )
        else:
            run = self._client.create_run(
                self.experiment_id, run_name=run_name, tags={"kind": "sweep"}
            )
            self.parent_run_id = run.info.run_id
            self._log_batch(
                self.parent_run_id, params=params, tags={**tags, SWEEP_OWNER_TAG: owner}
            )
        record_parent(study, self.parent_run_id, self.tracking_uri)
        where = mask_secrets(self.tracking_uri)
        if is_remote(self.tracking_uri):
            where += f"/#/experiments/{self.experiment_id}/runs/{self.parent_run_id}"
        log.info("MLflow: experiment %r, sweep run %s", self.experiment, where)

    def _open_experiment(self, tags: dict) -> str:
        """The experiment's id: created with an explicit artifact location and the study's
        storage as tags, or restored when it was deleted in the UI."""
        exp = self._client.get_experiment_by_name(self.experiment)
        if exp is None:
            about = {k: str(tags[k]) for k in ("study", "storage", FINGERPRINT_TAG) if k in tags}
            return self._client.create_experiment(
                self.experiment, artifact_location=self.artifact_location, tags=about
            )
        if exp.lifecycle_stage == "deleted":  # deleted in the UI: runs cannot be created in it
            self._client.restore_experiment(exp.experiment_id)
        return exp.experiment_id

    @_guarded()
    def log_trial(self, record: TrialLog) -> str | None:
        """A nested run for one trial (or one verification or guard run); returns its run id."""
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        result = record.result or {}
        t0 = time.perf_counter()
        if self.parent_run_id is None:
            raise RuntimeError("log_trial before start_sweep")
        now_ms = int(time.time() * 1000)
        wall_s = result.get("wall_s")
        start_ms = now_ms - int(1000 * wall_s) if isinstance(wall_s, int | float) else now_ms
        tags = {
            MLFLOW_PARENT_RUN_ID: self.parent_run_id,
            "kind": record.kind,
            "state": record.state,
            "trial_number": record.number,
        }
        if record.repeat is not None:
            tags["repeat"] = record.repeat
        if record.reason:
            tags["failure_reason"] = record.reason
        failure = result.get("failure") or {}
        if failure.get("kind"):
            tags["failure_kind"] = failure["kind"]
        if result.get("device"):
            tags["device"] = result["device"].get("name")
        run = self._client.create_run(
            self.experiment_id,
            start_time=start_ms,
            run_name=trial_run_name(record.number, record.kind, record.repeat),
            tags={k: truncate(v, MAX_TAG_CHARS) for k, v in tags.items() if v is not None},
        )
        run_id = run.info.run_id
        metrics = [(k, v, 0) for k, v in final_metrics(result).items()]
        for iv in result.get("intervals") or []:
            for key, name in INTERVAL_METRICS.items():
                value = iv.get(key)
                if isinstance(value, int | float) and isinstance(iv.get("step"), int):
                    metrics.append((name, float(value), iv["step"]))
        self._log_batch(run_id, metrics=metrics, params=dict(record.params))
        if record.job_dir is not None:
            for path, sub in job_artifacts(Path(record.job_dir)):
                self._client.log_artifact(run_id, str(path), sub)
        self._client.set_terminated(run_id, status=run_status(record.state))
        self.last_log_s = time.perf_counter() - t0
        return run_id

    @_guarded()
    def tag_winner(self, run_id: str) -> None:
        """Mark the winning trial's run (and point the sweep run at it)."""
        self._client.set_tag(run_id, "winner", "true")
        if self.parent_run_id is not None:
            self._client.set_tag(self.parent_run_id, "winner_run_id", run_id)

    @_guarded()
    def log_best(
        self, *, best_yaml: Path | None, extra_artifacts: list[Path], metrics: dict, tags: dict
    ) -> None:
        """best.yaml, plots and the winner's verified numbers on the sweep run."""
        if self.parent_run_id is None:
            raise RuntimeError("log_best before start_sweep")
        numeric = [
            (k, float(v), 0)
            for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        ]
        self._log_batch(self.parent_run_id, metrics=numeric, tags=tags)
        paths = [Path(best_yaml)] if best_yaml is not None else []
        for path in [*paths, *map(Path, extra_artifacts)]:
            if path.is_dir():
                self._client.log_artifacts(self.parent_run_id, str(path), path.name)
            elif path.is_file():
                self._client.log_artifact(self.parent_run_id, str(path))
            else:
                log.warning("MLflow: artifact %s does not exist; not logged", path)

    def log_cost(self, cost: Mapping[str, Any]) -> None:
        """Time to train and $ per 1B tokens (start and winner) on the sweep run."""
        self.log_best(best_yaml=None, extra_artifacts=[], metrics=cost_metrics(cost), tags={})

    def finish(self, status: str = "FINISHED") -> None:
        """Close the sweep run; FAILED when the sweep itself failed."""
        if status not in ("FINISHED", "FAILED", "KILLED"):
            raise ValueError(f"status must be FINISHED, FAILED or KILLED, got {status!r}")
        self._finish(status)

    @_guarded()
    def _finish(self, status: str) -> None:
        if self.parent_run_id is not None:
            self._client.set_terminated(self.parent_run_id, status=status)
            log.info("MLflow: %.1f s spent on tracking in this sweep", self.overhead_s)
