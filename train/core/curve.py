"""A loss curve from a trial: train a config for N optimizer steps from a fixed seed and read back
every step's training loss.

No new mode: a trial already records every step's mean loss over the global batch (its result's
`loss.steps`, warm-up steps first; train/core/result.py). `curve_keys` are the trial settings
that make those steps a curve two configs can be compared on: exactly `steps` full optimizer steps
(the one warm-up step full too, never projected, no time budget that could cut the window short,
no checkpoint saves), from `seed`. The seed (runtime.seed) fixes the initial weights and the
batch order: batch i's windows are drawn from (seed, split, i) alone (train/data/dataset.py), so
two configs with the same seed and the same batch.micro_batch see the same batches in the same
steps, whatever else they change. The numerics guard (sweeper/verify/guard.py) trains its curves
this way; `python -m train.trial` with these keys does it by hand.

Part of the torch-free core (train/core/).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WARMUP_STEPS = 1
# seconds no curve run reaches: the window ends at its step count only
NO_TIME_LIMIT_S = 1e9
# at least any grad_accum: the warm-up step takes every micro-batch, as the window's steps do
ALL_MICRO_BATCHES = 1_000_000


def curve_keys(*, steps: int, seed: int, seeds: int = 1) -> dict[str, Any]:
    """The trainer keys of a curve run of `steps` optimizer steps from `seed` (and, with `seeds`
    > 1, from each next seed too, in the same process: train/trial/seeds.py)."""
    if steps < WARMUP_STEPS + 2:
        raise ValueError(f"a loss curve needs at least {WARMUP_STEPS + 2} steps, got {steps}")
    window = steps - WARMUP_STEPS
    return {
        "runtime.seed": seed,
        "trial.seeds": seeds,
        "trial.warmup_steps": WARMUP_STEPS,
        "trial.max_steps": window,
        "trial.min_steps": window,
        "trial.max_seconds": NO_TIME_LIMIT_S,
        "trial.target_ci": 0.0,  # a precise step time must not end the curve early either
        "trial.project_above_s": 0,
        "trial.project_micro_steps": ALL_MICRO_BATCHES,
        "trial.profile": False,
        "checkpoint.every_steps": 0,
        "trial.save_record": "",  # a curve measures no save either
    }


def capped_split(
    *, tokens_per_step: int, micro_batch: int, block_size: int, world_size: int, max_tokens: int
) -> dict[str, int]:
    """The batch keys of a curve run whose optimizer step holds at most `max_tokens` tokens.

    A curve compares numerics, not batch sizes: every micro-batch runs the same kernels, so a
    step of fewer micro-batches (the micro-batch itself unchanged) shows the same rounding at a
    fraction of the cost. GPT-2 XL's 1,048,576-token step is 64 micro-batches of 16 x 1024; at
    65,536 tokens a curve step is 4 of them. {} where the step already fits."""
    per_micro = micro_batch * block_size * world_size
    if tokens_per_step <= max_tokens or per_micro >= tokens_per_step:
        return {}
    accum = max(1, max_tokens // per_micro)
    return {"batch.grad_accum": accum, "batch.tokens_per_step": accum * per_micro}


def loss_curve(result: Mapping[str, Any] | None) -> list[float] | None:
    """Every step's training loss of a complete trial's result, or None (failed, pruned, or an
    older result without `loss.steps`)."""
    if not result or result.get("status") != "complete":
        return None
    steps = (result.get("loss") or {}).get("steps")
    return [float(x) for x in steps] if steps else None


def curve_lrs(result: Mapping[str, Any] | None) -> list[float]:
    """The lr of each step of a result's curve ([] for a result from before schema 5)."""
    return [float(x) for x in ((result or {}).get("loss") or {}).get("lr") or []]


def seed_curves(
    result: Mapping[str, Any] | None, *, seed0: int, seeds: int
) -> tuple[dict[int, list[float]], dict[int, str]]:
    """The curves of seeds `seed0` .. `seed0 + seeds - 1` a run of trial.seeds=`seeds` trained
    (`loss.steps` the first, `loss.more_seeds` the rest), and why each missing one is missing."""
    first = loss_curve(result)
    if first is None:
        return {}, {}
    curves, why = {seed0: first}, {}
    more = {int(c.get("seed", -1)): c for c in (result or {}).get("loss", {}).get("more_seeds", [])}
    for seed in range(seed0 + 1, seed0 + seeds):
        c = more.get(seed)
        if c is not None and c.get("steps"):
            curves[seed] = [float(x) for x in c["steps"]]
        else:
            why[seed] = str((c or {}).get("failed") or "not trained (an older trainer?)")
    return curves, why
