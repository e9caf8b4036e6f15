"""The trials a stopped sweep killed, each given its MLflow run (status KILLED, with the reason and
the trial's log), so the parent run holds every trial the sweep started, the interrupted one too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sweeper.launch.batch import job_name
from sweeper.tracking.protocol import Tracker, TrialLog


def log_stopped_trials(
    tracker: Tracker,
    study: Any,
    numbers: Iterable[int],
    *,
    sweep_dir: Path,
    point: Callable[[dict], dict],
) -> None:
    """A run per trial in `numbers` (recorded as interrupted in `study`): its knobs (`point`
    turns a trial's params into trainer keys), its failure reason, and the files its job folder
    (linked as trial-<n> in `sweep_dir`) holds so far."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    for n in numbers:
        t = trials.get(n)
        if t is None:
            continue
        folder = sweep_dir / job_name(n)
        tracker.log_trial(
            TrialLog(
                number=n,
                state="interrupted",
                reason=t.user_attrs.get("failure_reason"),
                params=point(dict(t.params)),
                job_dir=folder.resolve() if folder.is_dir() else None,
            )
        )
