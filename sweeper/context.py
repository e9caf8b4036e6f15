"""What the search and the verification of one sweep share, built once by the engine."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from sweeper.launch.batch import JobLauncher
from sweeper.settings import SweepSettings
from sweeper.space.search_space import SearchSpace
from sweeper.study.budget import Budget
from sweeper.study.objective import ObjectiveConfig
from sweeper.tracking.protocol import Tracker


@dataclass(frozen=True, kw_only=True)
class SweepContext:
    study: optuna.Study
    space: SearchSpace
    settings: SweepSettings
    budget: Budget
    jobs: JobLauncher  # launches a batch of trial jobs through Hydra's launcher
    tracker: Tracker  # the MLflow SweepTracker, or its no-op stand-in when MLflow is off
    fixed: list[str]  # overrides every trial carries (the non-searched part of the request)
    objective: ObjectiveConfig
