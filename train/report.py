"""The one place `train/` talks to Optuna: report a trial's running tokens/s and ask whether to
stop.

The sweep process owns the study and stores its pruner's settings as a study attribute; this child
process reattaches to its trial by id through the shared storage (SQLite or PostgreSQL), records an
intermediate value, and asks the same pruner for a verdict.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)

PRUNER_ATTR = "throughput_sweep.pruner"  # study user attribute: {"name": ..., "kwargs": {...}}


class Reporter(Protocol):
    def report(self, *, step: int, value: float) -> bool:
        """Record `value` at `step`; True means the trial should stop (pruned)."""
        ...


def build_pruner(spec: dict | None):
    import optuna

    if not spec or spec.get("name") in (None, "none", "NopPruner"):
        return optuna.pruners.NopPruner()
    cls = getattr(optuna.pruners, spec["name"], None)
    if cls is None:
        raise ValueError(f"unknown Optuna pruner {spec['name']!r} in the study's attributes")
    return cls(**spec.get("kwargs", {}))


class StudyReporter:
    """Reports to trial `trial_id` of `study_name` in `storage`."""

    def __init__(self, *, storage: str, study_name: str, trial_id: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._study = optuna.load_study(study_name=study_name, storage=storage)
        # one storage connection: the pruner is only known after the study is loaded
        self._study.pruner = build_pruner(self._study.user_attrs.get(PRUNER_ATTR))
        self._trial = optuna.trial.Trial(self._study, trial_id)

    def report(self, *, step: int, value: float) -> bool:
        self._trial.report(value, step)
        return self._trial.should_prune()
