"""One table of the numbers a sweep reports, and every name each one goes by.

A number is read from a trial's result.json at `path`, logged to MLflow as `mlflow` (units in the
name), stored on the Optuna trial's `metrics` attribute as `trial_key`, summarized over the fresh
verification runs as `row_key` (best.yaml's provenance and the `best/...` metrics of the parent
MLflow run), and shown in the final table under `column`. Names are spelled here once; MLflow
(sweeper/tracking.py), the engine and the report (sweeper/report/console.py) read them from this
table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One number and its names; a name that is None means the number is not shown there."""

    path: tuple[str, ...] | None  # into result.json; None for a statistic over verified runs
    mlflow: str | None = None  # the trial run's MLflow metric
    trial_key: str | None = None  # the Optuna trial's `metrics` user attribute
    row_key: str | None = None  # a verified row (best.yaml provenance); also best/<row_key>
    best: str | None = None  # the winner's metric on the parent MLflow run
    column: str | None = None  # the final table's column header
    unit: str = ""  # tokens/s, s or fraction: how the final table prints it


def _verified(
    path: tuple[str, ...], mlflow: str, row_key: str, column: str, unit: str, **names: str
) -> Metric:
    """A number trials are compared by and verified runs summarize: on the Optuna trial as
    `row_key` and on the parent run as best/<row_key> unless `names` say otherwise."""
    keys = {"trial_key": row_key, "best": f"best/{row_key}", **names}
    return Metric(path=path, mlflow=mlflow, row_key=row_key, column=column, unit=unit, **keys)


METRICS: tuple[Metric, ...] = (
    _verified(("tokens_per_s",), "throughput/tokens_per_s", "tokens_per_s", "tokens/s", "tokens/s"),
    _verified(
        ("step_time_s", "p50"),
        "time/step_s_p50",
        "step_time_s",
        "step p50",
        "s",
        trial_key="step_time_p50_s",
        best="best/step_s_p50",
    ),
    Metric(path=("step_time_s", "p90"), mlflow="time/step_s_p90", unit="s"),
    Metric(
        path=("step_time_s", "cv"), mlflow="time/step_cv", trial_key="step_time_cv", unit="fraction"
    ),
    Metric(path=("warmup_s",), mlflow="time/warmup_s", trial_key="warmup_s", unit="s"),
    Metric(path=("compile_s",), mlflow="time/compile_s", trial_key="compile_s", unit="s"),
    _verified(
        ("time_frac", "data_wait"), "time/data_wait_frac", "data_wait_frac", "data wait", "fraction"
    ),
    Metric(path=("time_frac", "compute"), mlflow="time/compute_frac", unit="fraction"),
    Metric(path=("time_frac", "optimizer"), mlflow="time/optimizer_frac", unit="fraction"),
    Metric(path=("time_frac", "checkpoint"), mlflow="time/checkpoint_frac", unit="fraction"),
    Metric(path=("time_frac", "other"), mlflow="time/other_frac", unit="fraction"),
    _verified(("mfu", "spec"), "mfu/spec", "mfu_spec", "MFU spec", "fraction"),
    _verified(("mfu", "ceiling"), "mfu/ceiling", "mfu_ceiling", "MFU ceiling", "fraction"),
    Metric(path=("peak_memory_gib",), mlflow="memory/peak_gib", unit="GiB"),
    Metric(path=("loss", "first"), mlflow="loss/first"),
    Metric(path=("loss", "last"), mlflow="loss/last"),
    # the spread of tokens/s over a config's fresh verification runs (not in any one result)
    Metric(path=None, row_key="cv", best="best/cv", column="CV", unit="fraction"),
)
BY_ROW_KEY = {m.row_key: m for m in METRICS if m.row_key}
# the summary keys in the order the Optuna trial attribute has always stored them
TRIAL_KEYS = (
    "tokens_per_s",
    "step_time_p50_s",
    "step_time_cv",
    "mfu_spec",
    "mfu_ceiling",
    "data_wait_frac",
    "compile_s",
    "warmup_s",
)
_BY_TRIAL_KEY = {m.trial_key: m for m in METRICS if m.trial_key}
# the parent run's best/... metrics, in the order they have always been logged
BEST_ROW_KEYS = ("tokens_per_s", "cv", "step_time_s", "mfu_spec", "mfu_ceiling", "data_wait_frac")


def dig(doc: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` in nested dicts; None where a key is missing or a level is no dict."""
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def mlflow_paths() -> dict[str, tuple[str, ...]]:
    """MLflow metric name -> path into result.json, for every number a trial run logs."""
    return {m.mlflow: m.path for m in METRICS if m.mlflow and m.path}


def summary_metrics(result: dict) -> dict[str, Any]:
    """The handful of numbers a trial is compared by (stored on the Optuna trial)."""
    return {key: dig(result, _BY_TRIAL_KEY[key].path) for key in TRIAL_KEYS}


def best_metrics(row: dict) -> dict[str, Any]:
    """The winner's verified row as the parent MLflow run's best/... metrics."""
    return {BY_ROW_KEY[key].best: row[key] for key in BEST_ROW_KEYS}


def column(row_key: str) -> str:
    """The final table's header for a verified row's number."""
    return BY_ROW_KEY[row_key].column


def lead_metrics(lead: Any) -> dict[str, float]:
    """The winner's paired lead over the starting config (sweeper/verify/race_stats.py Comparison)
    as the parent run's metrics: the ratio and its interval; none when there is no paired lead."""
    if lead is None:
        return {}
    return {
        "best/lead_over_start": lead.ratio,
        "best/lead_over_start_low": lead.low,
        "best/lead_over_start_high": lead.high,
    }
