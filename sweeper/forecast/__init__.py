"""One forecast of a trial's time: what a process costs besides its steps, by device (`costs`),
and a trial's phases for a given step (`trial`). Every prediction of a trial's wall reads it: the
trial limits, plan mode, the numerics guard's price, the GPU lease plan. Pure, torch-free."""

from sweeper.forecast.costs import ProcessCosts, compile_s, costs_for, setup_s, uncached_note
from sweeper.forecast.trial import (
    TrialTime,
    is_float8,
    trial_compile_s,
    trial_time,
    window_steps,
)

__all__ = [
    "ProcessCosts",
    "TrialTime",
    "compile_s",
    "costs_for",
    "is_float8",
    "setup_s",
    "trial_compile_s",
    "trial_time",
    "uncached_note",
    "window_steps",
]
