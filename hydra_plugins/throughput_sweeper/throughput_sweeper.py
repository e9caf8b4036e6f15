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

        # A bad hydra.sweeper.* value raises here, inside Hydra's instantiate, which would wrap it
        # in "Error in call to target ..." and exit 1: kept, and said in one line at setup instead
        self._bad_setting: ValueError | None = None
        try:
            self._engine = SweepEngine(settings)
        except ValueError as e:
            self._bad_setting = e

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from sweeper.launch.log_routing import route_sweep_logging

        if self._bad_setting is not None:
            _refuse(self._bad_setting)
        # Hydra's per-job launch lines and known library chatter: the sweep's log file only
        route_sweep_logging(config)
        self._engine.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        try:
            return self._engine.sweep(arguments)
        except ValueError as e:  # a user error: one line, no traceback (a bug keeps its own)
            _refuse(e)


def _refuse(error: ValueError) -> None:
    log.error("%s", error)
    sys.exit(2)
