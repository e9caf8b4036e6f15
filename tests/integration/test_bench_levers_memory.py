"""scripts/bench/levers_memory.py: a cut-down run (tiny, micro-batch 4) measures all six rows and
passes its bounds; the bounds themselves, on made-up rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.bench import levers_memory as bench
from tests.integration.test_scripts import run_bench, table_rows


def rows(peaks: dict, *, off: float = 0.0) -> list[dict]:
    return [
        {
            "loss": loss,
            "ac": ac,
            "measured_mib": mib,
            "predicted_mib": mib * (1 + off),
            "phase": "x",
        }
        for (loss, ac), mib in peaks.items()
    ]


GOOD = {
    ("full", "none"): 100.0,
    ("full", "selective"): 95.0,
    ("full", "every"): 90.0,
    ("chunked", "none"): 50.0,
    ("chunked", "selective"): 45.0,
    ("chunked", "every"): 40.0,
}


@pytest.mark.parametrize(
    ("change", "off", "match"),
    [
        ({}, 0.0, None),
        ({("chunked", "none"): 61.0}, 0.0, "chunked is 61.0% of full"),
        ({("full", "selective"): 89.0}, 0.0, "loss=full: selective 89.0 MiB is not between"),
        ({("chunked", "selective"): 50.0}, 0.0, "loss=chunked: selective"),
        ({}, 0.16, "predicted +16.0% off"),
        ({}, -0.14, None),
    ],
)
def test_the_bounds(change, off, match) -> None:
    bad = bench.bound_failures(rows({**GOOD, **change}, off=off))
    if match is None:
        assert bad == []
    else:
        assert any(match in line for line in bad), bad


def test_a_cut_down_run_measures_six_rows_and_passes(tmp_path: Path) -> None:
    proc = run_bench(
        "levers_memory",
        ["--model", "tiny", "--micro-batch", "4"],
        tmp_path=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {(r[0], r[1]): float(r[2]) for r in table_rows(proc.stdout, "") if r[0] != "loss"}
    assert set(found) == {(loss, ac) for loss in bench.LOSSES for ac in bench.RECOMPUTE}
    assert found["chunked", "none"] <= 0.6 * found["full", "none"]
    assert "PASS" in proc.stdout
