"""The one place `train/` talks to Optuna: report a trial's running rate, ask whether to stop.

The sweep process owns the study and stores its pruner's settings and its objective as study
attributes; this child process reattaches to its trial by id through the shared storage (SQLite or
PostgreSQL), records an intermediate value in the study's own units, and asks the same pruner for
a verdict.

The units matter: a median pruner compares a trial's intermediate values with the other trials'
in the study's direction. A minimize study (objective=time_to_train, seconds) that was fed tokens/s
would prune the fastest trials, so running tokens/s is turned into seconds first: the time the
production run's planned tokens take at that rate (time_to_train without its compile and
checkpoint terms, which the running rate cannot know yet).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

PRUNER_ATTR = "throughput_sweep.pruner"  # study user attribute: {"name": ..., "kwargs": {...}}
# study user attribute: {"name": "tokens_per_s" | "time_to_train", "planned_tokens": int}
OBJECTIVE_ATTR = "throughput_sweep.objective"


class Reporter(Protocol):
    def report(self, *, step: int, value: float) -> bool:
        """Record the running tokens/s `value` at `step`; True means the trial should stop."""
        ...


def build_pruner(spec: dict | None):
    import optuna

    if not spec or spec.get("name") in (None, "none", "NopPruner"):
        return optuna.pruners.NopPruner()
    cls = getattr(optuna.pruners, spec["name"], None)
    if cls is None:
        raise ValueError(f"unknown Optuna pruner {spec['name']!r} in the study's attributes")
    return cls(**spec.get("kwargs", {}))


def study_value(tokens_per_s: float, *, direction: str, objective: dict | None) -> float:
    """A running tokens/s in the units and direction of the study's objective.

    maximize: tokens/s as is. minimize: seconds the objective's planned tokens take at this rate
    (seconds per token when the study does not say how many tokens are planned). Both orderings
    agree: a faster trial is better in either study.
    """
    if direction == "maximize":
        return tokens_per_s
    planned = (objective or {}).get("planned_tokens") or 1
    return planned / tokens_per_s if tokens_per_s > 0 else float("inf")


class StudyReporter:
    """Reports to trial `trial_id` of `study_name` in `storage`."""

    def __init__(self, *, storage: str, study_name: str, trial_id: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._study = optuna.load_study(study_name=study_name, storage=storage)
        attrs = self._study.user_attrs
        # one storage connection: the pruner is only known after the study is loaded
        self._study.pruner = build_pruner(attrs.get(PRUNER_ATTR))
        self._direction = self._study.direction.name.lower()
        self._objective = attrs.get(OBJECTIVE_ATTR)
        self._trial = optuna.trial.Trial(self._study, trial_id)

    def report(self, *, step: int, value: float) -> bool:
        reported = study_value(value, direction=self._direction, objective=self._objective)
        self._trial.report(reported, step)
        return bool(self._trial.should_prune())


def sweep_study(doc: Mapping[str, Any]) -> tuple[list, dict[str, Any]]:
    """The trials and the user attributes (the race's rounds among them) of the study a best.yaml
    names in its provenance; ValueError in one line saying why they cannot be read."""
    sweep = (doc.get("provenance") or {}).get("sweep") or {}
    storage, name = str(sweep.get("storage") or ""), str(sweep.get("study") or "")
    if not storage or not name:
        raise ValueError("best.yaml's provenance names no study")
    if "***" in storage:
        raise ValueError(f"the study's storage URL is masked in best.yaml ({storage})")
    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).exists():
        raise ValueError(f"the study's database {storage.removeprefix('sqlite:///')} is gone")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except Exception as exc:  # any storage error means: not reachable
        raise ValueError(f"study {name!r} in {storage} cannot be read ({exc})") from None
    return study.get_trials(deepcopy=False), dict(study.user_attrs)
