"""Points that would run out of device memory: refused before they launch, never after.

Two sources, both pure and torch-free:
- the memory model (train/core/memory_model.py): a point predicted not to fit in the
  device's memory, less the allocator's margin, is refused with its predicted GiB;
- the sweep's own out-of-memory trials: a point with the same knobs as one that ran out of
  memory and a micro-batch at least as large would too (activations grow with the micro-batch,
  nothing else shrinks), so it is refused naming that trial.

Both are rules of `sweeper.space.constraints.check_point`, so the grid, the startup design and the
search all respect them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from train.core.keys import (
    DTYPE,
    GRAD_ACCUM,
    MICRO_BATCH,
    PROGRESS_FILE,
    STUDY_NAME,
    STUDY_STORAGE,
    TRIAL_ID,
    TRIAL_OUT,
)
from train.core.rules import resolve_dtype_name

# Knobs that live in host memory only (the DataLoader, the checkpoint writer's host snapshot):
# on a GPU, where an out-of-memory error is about device memory, they do not make two points
# different. On a CPU everything shares one memory, so every knob counts there.
HOST_SIDE_PREFIXES = ("data.", "checkpoint.")
# Keys that only route a trial's reports; never knobs.
_BOOKKEEPING = (
    STUDY_STORAGE,
    STUDY_NAME,
    TRIAL_ID,
    TRIAL_OUT,
    PROGRESS_FILE,
)


@dataclass(frozen=True, kw_only=True)
class MemoryFit:
    """The memory model's answer for one point."""

    peak_gib: float  # predicted peak device memory
    usable_gib: float  # device memory less the allocator margin
    fits: bool


@dataclass(frozen=True, kw_only=True)
class OutOfMemory:
    """A trial of this sweep that ran out of memory, and the knobs it ran with."""

    trial: int  # Optuna trial number
    config: dict[str, Any]  # its flat config (the sweeper's base merged with its point)


def _model() -> Any:
    from train.core import memory_model  # torch-free; imported where it is used

    return memory_model


@functools.lru_cache(maxsize=8192)
def _predict(inputs: Any) -> Any:
    # the same memory-relevant knobs recur across thousands of points of a space scan
    return _model().predict_memory(inputs)


def predict(
    config: Mapping[str, Any], *, device_type: str, bf16_supported: bool, device_gib: float
) -> MemoryFit:
    """Predicted peak memory of a flat config on a device with `device_gib` GiB."""
    mm = _model()
    dtype = resolve_dtype_name(
        config.get(DTYPE), device_type=device_type, bf16_supported=bf16_supported
    )
    inputs = mm.inputs_from_config(dict(config), dtype=dtype, device_type=device_type)
    estimate = _predict(inputs)
    return MemoryFit(
        peak_gib=estimate.peak_gib,
        usable_gib=device_gib * (1 - mm.ALLOCATOR_MARGIN),
        fits=mm.fits(estimate, device_gib),
    )


def memory_reason(
    config: Mapping[str, Any],
    *,
    device_type: str,
    bf16_supported: bool,
    device_gib: float,
    device_name: str,
) -> str | None:
    """Why the memory model refuses this config, or None when it is predicted to fit."""
    v = predict(
        config, device_type=device_type, bf16_supported=bf16_supported, device_gib=device_gib
    )
    if v.fits:
        return None
    margin = _model().ALLOCATOR_MARGIN
    return (
        f"predicted {v.peak_gib:.1f} GiB > {device_gib:.4g} GiB x (1 - {margin:g}) usable on "
        f"{device_name or device_type}"
    )


def _compared(config: Mapping[str, Any], *, device_type: str) -> dict[str, Any]:
    """The knobs that make two points different for memory."""
    return {
        k: v
        for k, v in config.items()
        if k not in (MICRO_BATCH, GRAD_ACCUM, *_BOOKKEEPING)
        and not (device_type == "cuda" and k.startswith(HOST_SIDE_PREFIXES))
    }


def oom_reason(
    config: Mapping[str, Any], ooms: Sequence[OutOfMemory], *, device_type: str
) -> str | None:
    """Why an earlier out-of-memory trial rules this config out, or None.

    A config is ruled out by a trial that ran out of memory with the same knobs (host-side ones
    aside on a GPU) and a micro-batch no larger than this one's.
    """
    mb = config.get(MICRO_BATCH)
    if not isinstance(mb, int):
        return None
    mine = _compared(config, device_type=device_type)
    for oom in ooms:
        theirs = oom.config.get(MICRO_BATCH)
        if (
            isinstance(theirs, int)
            and mb >= theirs
            and _compared(oom.config, device_type=device_type) == mine
        ):
            return (
                f"trial {oom.trial} ran out of memory at batch.micro_batch={theirs} with the same "
                f"other knobs; batch.micro_batch={mb} needs at least as much"
            )
    return None


def past_ooms(trials: Sequence[Any], space: Any) -> list[OutOfMemory]:
    """The out-of-memory trials among a resumed study's finished `trials` (their own outcomes)
    whose knobs `space` (a SearchSpace) still has."""
    keys = {p.key for p in space.searched}
    return [
        OutOfMemory(trial=t.number, config=space.point(t.params).over(space.base))
        for t in trials
        if t.user_attrs.get("failure_kind") == "oom" and set(t.params) == keys
    ]
