"""The class Hydra discovers. Thin on purpose: Hydra imports every plugin module at every start,
so the real work (sweeper/engine.py, and Optuna) is imported only when a sweep actually runs."""

from __future__ import annotations

import logging
import sys
from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.throughput_sweeper.config import register

register()
log = logging.getLogger(__name__)


class ThroughputSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        from sweeper.engine import SweepEngine

        self._engine = SweepEngine(settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from sweeper.launch.quiet import route_sweep_logging

        # Hydra's per-job launch lines and known library chatter: the sweep's log file only
        route_sweep_logging(config)
        self._engine.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        try:
            return self._engine.sweep(arguments)
        except ValueError as e:  # a user error: one line, no traceback (a bug keeps its own)
            log.error("%s", e)
            sys.exit(2)
