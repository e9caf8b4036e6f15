"""The sweep's record of one measured checkpoint save per target (train/core/save_record.py):
what it accepts as a save, and that an entry it cannot read is measured again, never priced."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from train.core.save_record import SECTION, SaveCost, known_save, record_save

GOOD = {
    "stall_s": 1.5,
    "write_s": 2.0,
    "bytes": 1000,
    "mode": "async",
    "target": "/ckpt",
    "measured_by": "/sweep/0",
}


@pytest.mark.parametrize(
    ("change", "readable"),
    [
        ({}, True),
        ({"write_s": 1.5}, True),  # a sync save: the write is the stall
        ({"stall_s": math.nan}, False),
        ({"write_s": math.inf}, False),
        ({"stall_s": -1.0}, False),
        ({"write_s": 1.0}, False),  # a write shorter than the stall it contains
        ({"bytes": -5}, False),
        ({"stall_s": "slow"}, False),
    ],
)
def test_a_record_entry_is_a_save_only_when_its_numbers_could_be_one(
    tmp_path: Path, change: dict, readable: bool
) -> None:
    record = tmp_path / "saves.json"
    record.write_text(json.dumps({SECTION: {"k": {**GOOD, **change}}}))
    got = known_save(record, "k")
    if readable:
        assert got == SaveCost.of({**GOOD, **change})
    else:
        assert got is None  # measured again, not priced from a number no save could give


def test_recording_over_an_unreadable_entry_keeps_the_new_measurement(tmp_path: Path) -> None:
    record = tmp_path / "saves.json"
    record.write_text(json.dumps({SECTION: {"k": {**GOOD, "stall_s": math.nan}}}))
    mine = SaveCost.of({**GOOD, "stall_s": 0.5, "measured_by": "/sweep/3"})
    assert record_save(record, "k", mine) == mine
    # a readable entry recorded first wins over a later measurement
    record.write_text(json.dumps({SECTION: {"k": GOOD}}))
    assert record_save(record, "k", mine) == SaveCost.of(GOOD)
