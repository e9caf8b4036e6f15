"""What the sweep calls on its tracker (`Tracker`), and the no-op tracker that
`hydra.sweeper.mlflow.enabled=false` gets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from train.core.result import TrialResult


@dataclass(frozen=True, kw_only=True)
class TrialLog:
    """One nested MLflow run: a search trial, a verification (race) run or a guard curve run."""

    number: int  # the Optuna trial the run belongs to
    state: str  # complete | pruned | oom | excluded | interrupted | ...
    reason: str | None = None  # why it did not complete
    params: Mapping[str, Any]  # the point's knobs (dotted trainer keys)
    result: TrialResult | None = None
    job_dir: Path | None = None  # the run's folder: its files become the run's artifacts
    kind: str = "search"  # search | verify | guard
    repeat: int | None = None  # a verification run's round

    @classmethod
    def of_job(
        cls,
        number: int,
        out: Mapping[str, Any],
        params: Mapping[str, Any],
        *,
        kind: str = "search",
        repeat: int | None = None,
    ) -> TrialLog:
        """The run of a launched job, from its outcome `out` (state, reason, result, job_dir)."""
        return cls(
            number=number,
            state=out["state"],
            reason=out.get("reason"),
            params=params,
            result=out.get("result"),
            job_dir=Path(out["job_dir"]) if out.get("job_dir") else None,
            kind=kind,
            repeat=repeat,
        )


@runtime_checkable
class Tracker(Protocol):
    """What the sweep calls on its tracker: `SweepTracker` (MLflow) or `NullTracker` (tracking
    off). Every method returns quietly; a tracker never fails a sweep."""

    overhead_s: float  # seconds spent inside the tracker's methods
    last_log_s: float | None  # seconds the last log_trial took

    def start_sweep(
        self, *, run_name: str, params: dict, tags: dict, study: Any = None
    ) -> None: ...

    def log_trial(self, record: TrialLog) -> str | None: ...

    def tag_winner(self, run_id: str) -> None: ...

    def log_best(
        self, *, best_yaml: Path | None, extra_artifacts: list[Path], metrics: dict, tags: dict
    ) -> None: ...

    def log_cost(self, cost: Mapping[str, Any]) -> None: ...

    def finish(self, status: str = "FINISHED") -> None: ...


class NullTracker:
    """Tracking turned off (hydra.sweeper.mlflow.enabled=false): every call is a no-op."""

    overhead_s = 0.0
    last_log_s = 0.0

    def start_sweep(self, **_: Any) -> None:
        return None

    def log_trial(self, record: TrialLog) -> None:
        return None

    def tag_winner(self, run_id: str) -> None:
        return None

    def log_best(self, **_: Any) -> None:
        return None

    def log_cost(self, cost: Mapping[str, Any]) -> None:
        return None

    def finish(self, status: str = "FINISHED") -> None:
        return None
