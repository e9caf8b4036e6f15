"""A trial's checkpoint save under `trial.save_record`: read from the sweep's record, or measured
once after the window where the record has none for its target (train/core/save_record.py).

The measurement is one save as the production run makes it (the same Checkpointer, the trial's
private folder under checkpoint.dir), taken after the measured window so no step time holds it:
the seconds the call blocked, then the wait for an async write to land (the whole write), and
the file's size.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from train import device as dev
from train.core.save_record import SaveCost, known_save, record_save, save_key
from train.run.loop import Session

log = logging.getLogger(__name__)


def save_key_of(s: Session) -> str:
    """The record's entry for this session's saves."""
    return save_key(
        target=str(Path(s.cfg.checkpoint.dir).expanduser().resolve()),
        mode=s.cfg.checkpoint.mode,
        device=dev.device_name(s.device),
        num_params=s.raw_model.num_params(exclude_position_embedding=False),
    )


def recorded_save(s: Session) -> SaveCost | None:
    """The save the sweep's record holds for this session's target, or None."""
    return known_save(Path(s.cfg.trial.save_record), save_key_of(s))


def measure_save(s: Session, *, step: int, measured_by: str) -> SaveCost:
    """One save of the session's state as checkpoint `step`, timed: the call's stall, then its
    write to the end."""
    stall = s.checkpointer.save(
        step=step, model=s.raw_model, optimizer=s.optimizer, extra={"step": step}
    )
    write = stall + s.checkpointer.wait()
    return SaveCost(
        stall_s=stall,
        write_s=write,
        bytes=int(s.checkpointer.bytes_written or 0),
        mode=s.cfg.checkpoint.mode,
        target=str(Path(s.cfg.checkpoint.dir).expanduser().resolve()),
        measured_by=measured_by,
    )


def checkpoint_save(
    s: Session, known: SaveCost | None, *, step: int, measured_by: str
) -> dict[str, Any]:
    """The result's `checkpoint_save`: the record's (`known`), else one measured now and recorded
    (another trial's, where one recorded the target first)."""
    if known is not None:
        return {**known.as_dict(), "here": False}
    measured = measure_save(s, step=step, measured_by=measured_by)
    got = record_save(Path(s.cfg.trial.save_record), save_key_of(s), measured)
    log.info(
        "checkpoint save measured once for %s (%s): %.2f s blocked, %.2f s written, %d bytes",
        measured.target,
        measured.mode,
        measured.stall_s,
        measured.write_s,
        measured.bytes,
    )
    return {**got.as_dict(), "here": got == measured}
