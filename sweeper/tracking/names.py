"""What the MLflow side of a sweep is called and holds, as pure functions: the tracking URI and
artifact folder, the experiment of a study and its storage, run names and statuses, and the metrics
and files a trial run gets. No mlflow import here: tests read these tables without a server.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeper.masking import mask_secrets
from sweeper.metrics import dig, mlflow_paths
from train.core.result import MEASURED_STATES

if TYPE_CHECKING:
    from train.core.result import TrialResult

# MLflow 3.x limits (mlflow/utils/validation.py): param values <= 6000 chars, tag values <= 8000,
# one log_batch call <= 1000 metrics and <= 100 params + tags.
MAX_PARAM_CHARS, MAX_TAG_CHARS = 6000, 8000
MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH = 1000, 100

# MLflow metric name (units in the name) -> path into result.json (sweeper/metrics.py).
FINAL_METRICS: dict[str, tuple[str, ...]] = mlflow_paths()
# result["intervals"][i] key -> metric name, logged at step=interval["step"].
INTERVAL_METRICS = {
    "tokens_per_s": "interval/tokens_per_s",
    "step_time_s": "interval/step_s",
    "data_wait_frac": "interval/data_wait_frac",
}
JOB_ARTIFACTS = ("trial_config.yaml", "trial.log", "result.json")
# A measured trial state (MEASURED_STATES) is a normal ending of a run; a trial the stopped sweep
# killed is KILLED, and everything else shows as FAILED in the UI.
KILLED_STATES = ("interrupted",)

SWEEP_OWNER_TAG = "sweep_owner"  # host:pid of the sweep process that holds the parent run
FINGERPRINT_TAG = "storage_fingerprint"  # which Optuna storage the study lives in (see below)


def default_tracking_uri(cwd: Path) -> str:
    """MLFLOW_TRACKING_URI if set, else a SQLite file in `cwd` (MLflow 3's own default location;
    the ./mlruns file store is refused unless MLFLOW_ALLOW_FILE_STORE=true)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{cwd.resolve() / 'mlflow.db'}"


def default_artifact_location(cwd: Path, experiment: str) -> str:
    """<cwd>/mlartifacts/<experiment> as a file URI: the experiment's runs land in <run_id>/ under
    it, so one folder per experiment keeps several studies' artifacts apart."""
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", experiment).strip("._") or "experiment"
    return (cwd / "mlartifacts" / folder).resolve().as_uri()


def is_remote(uri: str) -> bool:
    """A tracking server (or Databricks): it chooses where artifacts go unless told otherwise."""
    return uri.split(":", 1)[0] in ("http", "https", "databricks")


def storage_fingerprint(storage: str, *, cwd: Path | None = None) -> str:
    """8 hex digits that tell Optuna storages apart: a hash of the URL with its secrets masked
    (a changed password keeps the fingerprint) and a relative SQLite path made absolute (the same
    file reached from another folder is the same storage)."""
    url = mask_secrets(storage.strip())
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
        url = prefix + str(((cwd or Path.cwd()) / url[len(prefix) :]).resolve())
    return hashlib.sha256(url.encode()).hexdigest()[:8]


def experiment_name(study_name: str, storage: str) -> str:
    """The default experiment of a study: its name and its storage's fingerprint, so two studies
    of one name in two storages (a laptop's SQLite file, the team's PostgreSQL) never share one."""
    return f"{study_name} (storage {storage_fingerprint(storage)})"


def truncate(value: Any, limit: int) -> str:
    text = mask_secrets(str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def final_metrics(result: TrialResult) -> dict[str, float]:
    """The trial's headline numbers under slash-namespaced names; missing/non-numeric skipped."""
    out = {}
    for name, path in FINAL_METRICS.items():
        value = dig(result, path)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def cost_metrics(cost: Mapping[str, Any]) -> dict[str, float]:
    """The parent run's price metrics from the cost document (sweeper/report/time_to_train.py
    `sweep_costs`): hours to train the planned tokens and $ per 1B tokens, for the starting config
    and the winner; a role or price that is unknown is left out, never logged as 0."""
    metrics = {}
    for role in ("start", "winner"):
        c = cost.get(role) or {}
        if c.get("time_to_train_h") is not None:
            metrics[f"cost/time_to_train_h_{role}"] = float(c["time_to_train_h"])
        if c.get("usd_per_1b_tokens") is not None:
            metrics[f"cost/usd_per_1b_tokens_{role}"] = float(c["usd_per_1b_tokens"])
    return metrics


def trial_run_name(number: int, kind: str, repeat: int | None) -> str:
    if kind == "verify":
        return f"verify-{number:03d}-r{repeat if repeat is not None else 0}"
    return f"trial-{number:03d}"


def run_status(state: str) -> str:
    """The MLflow status of a trial's run: FINISHED for a measured ending, KILLED for a trial the
    stopped sweep killed, FAILED for the rest."""
    if state in MEASURED_STATES:
        return "FINISHED"
    return "KILLED" if state in KILLED_STATES else "FAILED"


def job_artifacts(job_dir: Path) -> list[tuple[Path, str | None]]:
    """(file, artifact sub-dir) pairs to upload from a job dir; traces exist only when profiling."""
    files: list[tuple[Path, str | None]] = [
        (job_dir / n, None) for n in JOB_ARTIFACTS if (job_dir / n).is_file()
    ]
    for trace in sorted(job_dir.rglob("trace.json")):
        rel = trace.parent.relative_to(job_dir)
        files.append((trace, None if rel == Path(".") else rel.as_posix()))
    return files
