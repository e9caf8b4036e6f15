"""One trial process's wall, phase by phase: set-up, compile (once per graph: cold, or from the
compile cache), warm-up, the measured window (ended early where trial.target_ci's interval is
reached) and its checkpoint saves, for a given full optimizer step.

Every prediction of a trial's time reads this: the trial limits (sweeper/space/limits.py, with a
safety factor), plan mode's wall (sweeper/plan/wall.py), the numerics guard's price
(sweeper/plan/guard_price.py) and the GPU lease plan (scripts/acceptance/lease.py). The step
itself is the arithmetic's (limits.predict_step) or a measurement. Pure, torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sweeper.forecast.costs import (
    AUTOTUNE_FACTOR,
    ProcessCosts,
    compile_s,
    costs_for,
    setup_s,
)
from train.core.config import TrialConfig
from train.core.keys import (
    CHECKPOINT_EVERY,
    COMPILE,
    COMPILE_UNIT,
    FLOAT8,
    GRAD_ACCUM,
    N_LAYER,
    PROJECT_ABOVE_S,
    PROJECT_MICRO_STEPS,
    TRIAL_CI_MIN_STEPS,
    TRIAL_MAX_SECONDS,
    TRIAL_MAX_STEPS,
    TRIAL_MIN_STEPS,
    TRIAL_PROFILE,
    TRIAL_PROFILE_STEPS,
    TRIAL_SAVE_RECORD,
    TRIAL_SEEDS,
    TRIAL_TARGET_CI,
    TRIAL_WARMUP_STEPS,
)
from train.core.meters import projects, short_step
from train.core.window_ci import first_ci_step, steps_to_ci

# torch.compile's allowance in a trial's hard limit: 300 s for 48 layers, scaled by depth, at
# least 60 s (a 2-layer model's first compile on a 2-core CPU takes 25-40 s).
COMPILE_ALLOWANCE_PER_LAYER_S = 300.0 / 48
COMPILE_ALLOWANCE_MIN_S = 60.0
# A checkpoint holds the fp32 weights and AdamW's two fp32 moments: 12 bytes per parameter.
CHECKPOINT_BYTES_PER_PARAM = 12
WRITE_BYTES_PER_S = 1e9  # a conservative local-disk rate (tmpfs and NVMe are faster)
# The trainer's defaults, for a config that leaves a trial.* key out.
TRIAL_DEFAULTS = TrialConfig()
# Step-to-step coefficient of variation the expected window assumes for trial.target_ci's early
# stop (train/core/window_ci.py) on a CPU: this 2-core VM's fixed work varies 12-23%
# (DEVELOPERS.md), so a +-2% interval is rarely reached in 20 steps. A GPU's is measured
# (sweeper/forecast/costs.py step_cv); a sweep's own trials replace either where a calibration
# exists (sweeper/plan/calibration.py).
CPU_STEP_CV = 0.15


@dataclass(frozen=True, kw_only=True)
class TrialTime:
    """A trial's duration, broken down (expected values, or the SAFETY-scaled bounds)."""

    setup_s: float  # process start to first step
    # torch.compile of the first step (0 when runtime.compile=none; a few layers' worth under
    # runtime.compile_unit=block)
    compile_s: float
    warmup_s: float  # the warm-up steps, compile excluded (each seed's, trial.seeds > 1)
    window_s: float  # the measured window (each seed's)
    checkpoint_s: float  # checkpoint writes inside the window
    window_steps: int  # measured steps the window runs
    projected: bool  # whether the window measures short steps and projects them

    @property
    def total_s(self) -> float:
        return self.setup_s + self.compile_s + self.warmup_s + self.window_s + self.checkpoint_s


def window_steps(step_s: float, *, min_steps: int, max_steps: int, max_seconds: float) -> int:
    """Measured steps a trial runs at `step_s` a step: it stops at max_steps, or at the first
    step at or past min_steps once max_seconds have gone by (the window of
    train/trial/measurement.py)."""
    if step_s <= 0:
        return max_steps
    return min(max_steps, max(min_steps, math.ceil(max_seconds / step_s)))


def save_seconds(num_params: int) -> float:
    """One checkpoint save of a model of `num_params` at the assumed write rate."""
    return num_params * CHECKPOINT_BYTES_PER_PARAM / WRITE_BYTES_PER_S


def is_float8(cfg: Mapping[str, Any]) -> bool:
    return str(cfg.get(FLOAT8) or "none") != "none"


def trial_compile_s(
    cfg: Mapping[str, Any],
    costs: ProcessCosts,
    *,
    n_layer: int,
    scale: float = 1.0,
    warm: bool = False,
    unit: str | None = None,
) -> float:
    """The compile seconds of one trial of `cfg` (at compile unit `unit` where given, else
    cfg's): the expectation (`scale` 1; from the cache when `warm`), or a limit's allowance,
    never below the generic one and sized by the whole depth whatever the compile unit (a limit
    errs long: a block compile that ran long is still a measurement)."""
    mode = str(cfg.get(COMPILE) or "none")
    expected = compile_s(
        costs,
        mode=mode,
        n_layer=n_layer,
        float8=is_float8(cfg),
        warm=warm and scale == 1,
        unit=str(unit or cfg.get(COMPILE_UNIT) or "model"),
    )
    if scale > 1 and mode != "none":
        autotune = AUTOTUNE_FACTOR if "autotune" in mode else 1.0
        generic = max(COMPILE_ALLOWANCE_MIN_S, COMPILE_ALLOWANCE_PER_LAYER_S * n_layer)
        return max(scale * expected, autotune * generic)
    return expected


def trial_time(
    cfg: Mapping[str, Any],
    full_step_s: float,
    *,
    device_type: str,
    device_name: str = "",
    num_params: int,
    scale: float = 1.0,
    warm: bool = False,
) -> TrialTime:
    """The phases of one trial of `cfg` when a full optimizer step takes `full_step_s`. `scale`
    multiplies the fixed allowances (1 for the expectation, SAFETY for a limit); `warm`: its
    graph is in the compile cache already (an expectation only: a limit allows a cold compile)."""
    n_layer = int(cfg[N_LAYER])
    accum = int(cfg.get(GRAD_ACCUM) or 1)
    # train/trial/measurement.py warms up on short steps of at most project_micro_steps
    # micro-batches, and measures short steps projected to full ones when a full step would
    # exceed project_above_s (a trainer without those keys always runs full steps).
    micro_steps = int(cfg.get(PROJECT_MICRO_STEPS) or accum)
    short_s = full_step_s * short_step(accum, micro_steps) / accum
    projected = projects(
        grad_accum=accum,
        project_micro_steps=micro_steps,
        above_s=float(cfg.get(PROJECT_ABOVE_S) or 0.0),
        full_step_s=full_step_s,
    )
    step_s = short_s if projected else full_step_s
    warmup_steps = int(cfg.get(TRIAL_WARMUP_STEPS) or TRIAL_DEFAULTS.warmup_steps)
    max_steps = int(cfg.get(TRIAL_MAX_STEPS) or TRIAL_DEFAULTS.max_steps)
    n = window_steps(
        step_s,
        min_steps=int(cfg.get(TRIAL_MIN_STEPS) or TRIAL_DEFAULTS.min_steps),
        max_steps=max_steps,
        max_seconds=float(cfg.get(TRIAL_MAX_SECONDS) or TRIAL_DEFAULTS.max_seconds),
    )
    extra = int(cfg.get(TRIAL_PROFILE_STEPS) or 0) if cfg.get(TRIAL_PROFILE) else 0
    every = int(cfg.get(CHECKPOINT_EVERY) or 0)
    target = float(cfg.get(TRIAL_TARGET_CI) or 0.0)
    costs = costs_for(device_name if device_type == "cuda" else "")
    if scale == 1 and target > 0:  # the expectation ends where the interval does; limits do not
        first = first_ci_step(
            ci_min_steps=int(cfg.get(TRIAL_CI_MIN_STEPS) or TRIAL_DEFAULTS.ci_min_steps),
            checkpoint_every=every,
            max_steps=max_steps,
        )
        # "plan.step_cv": a measured CV the plan passes in (not a trainer key)
        device_cv = costs.step_cv if device_type == "cuda" else CPU_STEP_CV
        cv = float(cfg.get("plan.step_cv") or device_cv)
        n = min(n, steps_to_ci(cv, target_ci=target, first_step=first, max_steps=max_steps))
    saves = n // every if every > 0 else 0
    if cfg.get(TRIAL_SAVE_RECORD):
        # the window saves nothing; the first trial of its target measures one save after it: a
        # limit allows for it, the sweep's wall counts it once (sweeper/plan/wall.py)
        saves = 1 if scale > 1 else 0
    save_s = save_seconds(num_params)
    # trial.seeds > 1 trains the curve again from each next seed in this process: its warm-up
    # and window again, not its set-up or compile (train/trial/seeds.py)
    seeds = int(cfg.get(TRIAL_SEEDS) or 1)
    return TrialTime(
        setup_s=scale * setup_s(costs, device_type=device_type, n_layer=n_layer),
        compile_s=trial_compile_s(cfg, costs, n_layer=n_layer, scale=scale, warm=warm),
        warmup_s=seeds * warmup_steps * short_s,
        window_s=seeds * n * step_s + extra * step_s,
        checkpoint_s=scale * saves * save_s,
        window_steps=n,
        projected=projected,
    )
