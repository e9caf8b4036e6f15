"""A best.yaml that saves no checkpoints says so in the report (issue 24, item 4): `search=smoke`
and `search=quick` trials save nothing, so best.yaml pins `checkpoint.every_steps: 0`, and a
production run from it would save nothing unless the report says so. The real sweep's line is
checked in tests/integration/test_race_threads.py (a smoke sweep)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sweeper.report import handoff
from sweeper.report.handoff import checkpoint_lines


def test_a_best_yaml_that_saves_nothing_says_so():
    (line,) = checkpoint_lines(None, every_steps=0)
    assert line.startswith("checkpoints: best.yaml saves NONE")
    assert "set checkpoint.every_steps before a long run" in line


def test_an_unmeasured_interval_is_named_as_such():
    (line,) = checkpoint_lines(None, every_steps=50)
    assert line == (
        "checkpoints: best.yaml saves every 50 steps (no save was measured to choose "
        "an interval from)"
    )


@pytest.mark.parametrize(
    ("error", "ends_the_sweep"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),  # the disk-full line, exit 1
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EACCES, "Permission denied"), False),  # said; best.yaml stands
        (ValueError("data.dir holds no meta.pkl"), False),
    ],
)
def test_a_full_disk_at_the_exports_ends_the_sweep_and_other_errors_are_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error, ends_the_sweep
):
    def fail(*_args, **_kwargs):
        raise error

    monkeypatch.setattr(
        handoff, "read_pinned_config", lambda _p: {"checkpoint": {"every_steps": 0}}
    )
    monkeypatch.setattr(handoff, "write_handoffs", fail)
    if ends_the_sweep:
        with pytest.raises(OSError):
            handoff.handoff_report(Path("best.yaml"), [], None)
        return
    lines = handoff.handoff_report(Path("best.yaml"), [], None)
    assert lines[0].startswith("checkpoints: best.yaml saves NONE")
    assert f"best_nanogpt.py / best_llmc.sh not written: {error}" in caplog.text
