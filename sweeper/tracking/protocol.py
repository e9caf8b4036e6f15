"""What the sweep calls on its tracker (`Tracker`), and the no-op tracker that
`hydra.sweeper.mlflow.enabled=false` gets."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from train.core.result import TrialResult


@runtime_checkable
class Tracker(Protocol):
    """What the sweep calls on its tracker: `SweepTracker` (MLflow) or `NullTracker` (tracking
    off). Every method returns quietly; a tracker never fails a sweep."""

    overhead_s: float  # seconds spent inside the tracker's methods
    last_log_s: float | None  # seconds the last log_trial took

    def start_sweep(
        self, *, run_name: str, params: dict, tags: dict, study: Any = None
    ) -> None: ...

    def log_trial(
        self,
        *,
        number: int,
        state: str,
        reason: str | None,
        params: dict,
        result: TrialResult | None,
        job_dir: Path | None,
        kind: str = "search",
        repeat: int | None = None,
    ) -> str | None: ...

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

    def log_trial(self, **_: Any) -> None:
        return None

    def tag_winner(self, run_id: str) -> None:
        return None

    def log_best(self, **_: Any) -> None:
        return None

    def log_cost(self, cost: Mapping[str, Any]) -> None:
        return None

    def finish(self, status: str = "FINISHED") -> None:
        return None
