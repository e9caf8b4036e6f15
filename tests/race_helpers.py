"""A race outside a sweep, for tests and scripts/bench/race.py: the sweep context a race needs,
built from a launcher and settings alone. Kept out of sweeper/ so that production code holds no
fixtures; scripts import it from here (the repository root is on their sys.path).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import optuna

from sweeper.context import SweepContext
from sweeper.space.point import Point
from sweeper.study.budget import Budget
from sweeper.study.objective import ObjectiveConfig
from sweeper.tracking.protocol import NullTracker


def race_context(
    *, jobs: Any, settings: Any, study: optuna.Study | None = None, space: Any = None
) -> SweepContext:
    """A race outside a sweep (scripts/bench/race.py, tests): the given launcher and settings,
    tokens/s as the objective, no tracking, a fresh in-memory study by default, and no search
    space unless a test's search is given one."""
    return SweepContext(
        study=study or optuna.create_study(direction="maximize"),
        space=space or SimpleNamespace(point=Point.of),
        settings=settings,
        budget=Budget(settings),
        tracker=NullTracker(),
        jobs=jobs,
        fixed=[],
        objective=ObjectiveConfig(name="tokens_per_s"),
    )
