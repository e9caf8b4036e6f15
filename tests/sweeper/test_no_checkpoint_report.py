"""A best.yaml that saves no checkpoints says so in the report (issue 24, item 4): `search=smoke`
and `search=quick` trials save nothing, so best.yaml pins `checkpoint.every_steps: 0`, and a
production run from it would save nothing unless the report says so. The real sweep's line is
checked in tests/integration/test_race_threads.py (a smoke sweep)."""

from __future__ import annotations

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
