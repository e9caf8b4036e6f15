"""A checkpoint save measured once per sweep and target, and priced for every trial from it.

What one save costs depends on what is written (the model's weights and AdamW's moments: the same
bytes for every point of one model), how (checkpoint.mode) and where (checkpoint.dir), not on the
knobs a search varies. Where a sweep searches no checkpoint knob, saving inside every trial's
window would pay the same write again and again (18.7 s a trial for gpt2-xl): instead the sweep
gives its trials `trial.save_record`, and the first trial of a target measures one save after
its window (train/trial/save_price.py) and writes it here; every later trial of the target runs
its window without saves and carries that measurement, which time_to_train and best.yaml's
checkpoint interval price (sweeper/study/objective.py `save_stall_s`). Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from train.core.first_record import first_wins, read_section

SECTION = "saves"  # the record's section (train/core/first_record.py)
RECORD_NAME = "checkpoint_saves.json"  # the record's file name in a sweep's folder


@dataclass(frozen=True, kw_only=True)
class SaveCost:
    """One measured save: what blocked the caller and how long the whole write took."""

    stall_s: float  # the caller blocked: the whole write (sync), the host snapshot (async)
    write_s: float  # save call to the file complete (the same as stall_s for a sync save)
    bytes: int  # the checkpoint file's size
    mode: str  # checkpoint.mode: sync | async
    target: str  # checkpoint.dir, resolved
    measured_by: str  # the trial folder that measured it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> SaveCost:
        """A recorded entry; ValueError where its seconds or size could not be a save's (not
        finite, negative, a write shorter than its stall), which would price every trial wrong."""
        stall, write = float(entry["stall_s"]), float(entry["write_s"])
        size = int(entry["bytes"])
        if not (math.isfinite(write) and 0 <= stall <= write and size >= 0):
            raise ValueError(f"not a save: stall {stall} s, write {write} s, {size} bytes")
        return cls(
            stall_s=stall,
            write_s=write,
            bytes=size,
            mode=str(entry["mode"]),
            target=str(entry["target"]),
            measured_by=str(entry["measured_by"]),
        )


def save_key(*, target: str, mode: str, device: str, num_params: int) -> str:
    """The record's entry for a save: where, how, from which device, of how big a model."""
    return f"{target}|{mode}|{device}|{num_params} params"


def known_save(path: Path, key: str) -> SaveCost | None:
    """The save the record holds for `key`, or None (not measured yet in this sweep)."""
    entry = read_section(Path(path), SECTION).get(key)
    try:
        return SaveCost.of(entry) if entry is not None else None
    except (KeyError, TypeError, ValueError):  # an entry this code cannot read: measure again
        return None


def record_save(path: Path, key: str, cost: SaveCost) -> SaveCost:
    """`cost` recorded for `key`, or the cost another trial recorded first (`cost` itself where
    that entry cannot be read as a save)."""
    got, _ = first_wins(Path(path), section=SECTION, key=key, value=cost.as_dict())
    try:
        return SaveCost.of(got)
    except (KeyError, TypeError, ValueError):
        return cost


def priced_stall_s(cost: Mapping[str, Any], *, planned_every: int, steady_step_s: float) -> float:
    """Seconds one save blocks training at a save every `planned_every` steps of
    `steady_step_s`: a sync save blocks for its whole write; an async one for its snapshot, plus
    what is left of the previous write when the next save comes (its write less the steps between
    the two)."""
    stall = float(cost["stall_s"])
    if cost.get("mode") != "async":
        return stall
    behind = float(cost["write_s"]) - stall - planned_every * steady_step_s
    return stall + max(0.0, behind)
