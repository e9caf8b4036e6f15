"""MLflow tracking for a sweep: an experiment per study and storage, one parent run per sweep (kept
across interruptions and resumes), a nested run per trial and per verification run.

- `names`: pure tables and names (URIs, the experiment of a study, run names and statuses, metrics)
- `parent`: which earlier parent run a resumed sweep continues
- `mlflow_run`: `SweepTracker`, the MLflow client side; every public method swallows its errors
- `protocol`: the `Tracker` the sweep calls, and `NullTracker` for
  `hydra.sweeper.mlflow.enabled=false`
"""

from sweeper.tracking.mlflow_run import (
    HTTP_BACKOFF_ENV,
    HTTP_RETRIES_ENV,
    HTTP_TIMEOUT_ENV,
    QUIET_URL_ENV,
    SweepTracker,
)
from sweeper.tracking.names import (
    FINAL_METRICS,
    FINGERPRINT_TAG,
    INTERVAL_METRICS,
    JOB_ARTIFACTS,
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_CHARS,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_CHARS,
    SWEEP_OWNER_TAG,
    cost_metrics,
    default_artifact_location,
    default_tracking_uri,
    experiment_name,
    final_metrics,
    is_remote,
    job_artifacts,
    run_status,
    storage_fingerprint,
    trial_run_name,
    truncate,
)
from sweeper.tracking.parent import PARENT_ATTR
from sweeper.tracking.protocol import NullTracker, Tracker

__all__ = [
    "FINAL_METRICS",
    "FINGERPRINT_TAG",
    "HTTP_BACKOFF_ENV",
    "HTTP_RETRIES_ENV",
    "HTTP_TIMEOUT_ENV",
    "INTERVAL_METRICS",
    "JOB_ARTIFACTS",
    "MAX_METRICS_PER_BATCH",
    "MAX_PARAMS_TAGS_PER_BATCH",
    "MAX_PARAM_CHARS",
    "MAX_TAG_CHARS",
    "PARENT_ATTR",
    "QUIET_URL_ENV",
    "SWEEP_OWNER_TAG",
    "NullTracker",
    "SweepTracker",
    "Tracker",
    "cost_metrics",
    "default_artifact_location",
    "default_tracking_uri",
    "experiment_name",
    "final_metrics",
    "is_remote",
    "job_artifacts",
    "run_status",
    "storage_fingerprint",
    "trial_run_name",
    "truncate",
]
