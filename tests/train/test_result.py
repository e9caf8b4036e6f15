"""The trial result schema (train/core/result.py): its keys, its writer and its one reader."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train.core.result import (
    SCHEMA_VERSION,
    Failure,
    ResultError,
    TrialResult,
    load_result,
    read_result,
    write_result,
)
from train.core.result_build import build_result
from train.trial.summary import format_summary

REPO = Path(__file__).resolve().parents[2]


def _failed() -> TrialResult:
    return build_result(
        cfg=None,
        session=None,
        raw=None,
        failure=Failure(kind="oom", message="MemoryError: planted\nmore"),
        fingerprint={"python": "3"},
        wall_s=1.5,
        resolved_config={"model": {"name": "tiny"}},
    )


def test_a_failed_result_has_every_key_of_the_schema() -> None:
    result = _failed()
    assert list(result) == list(TrialResult.__annotations__)  # the TypedDict is the key order
    assert result["schema_version"] == SCHEMA_VERSION
    assert result["status"] == "failed"
    assert result["failure"] == {"kind": "oom", "message": "MemoryError: planted\nmore"}
    assert result["memory"] == {"predicted_gib": None, "measured_gib": None, "measured_by": None}
    assert result["config"] == {"model": {"name": "tiny"}}


def test_written_results_read_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "job" / "result.json"
    write_result(_failed(), path)
    assert json.loads(path.read_text()) == _failed()
    assert load_result(path) == read_result(path) == _failed()
    assert not path.with_suffix(".json.tmp").exists()  # written atomically, through a rename
    text = format_summary(load_result(path), path)
    assert text == f"trial FAILED (oom): MemoryError: planted\nresult: {path}"


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{not json", "unreadable result.json"),
        ("[1, 2]", "not a JSON object"),
        ('{"status": "complete"}', "schema_version None"),
        (json.dumps({"schema_version": 99}), "schema_version 99"),
    ],
)
def test_what_is_not_a_result_is_refused_by_load_and_none_to_read(
    tmp_path: Path, content: str, error: str
) -> None:
    path = tmp_path / "result.json"
    path.write_text(content)
    with pytest.raises(ResultError, match=error):
        load_result(path)
    assert read_result(path) is None


def test_read_result_tolerates_no_file_and_older_schemas(tmp_path: Path) -> None:
    assert read_result(None) is None
    assert read_result(tmp_path / "missing.json") is None
    old = tmp_path / "v1.json"
    old.write_text(json.dumps({"schema_version": 1, "status": "complete", "tokens_per_s": 5.0}))
    assert read_result(old) == {"schema_version": 1, "status": "complete", "tokens_per_s": 5.0}


def test_the_schema_imports_no_torch() -> None:
    """The sweeper reads results with this module, and the sweeper process never imports torch."""
    code = "import sys, train.core.result; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_a_process_age_is_read_from_proc_and_the_setup_line_names_each_phase(tmp_path) -> None:
    import os

    from train.trial.setup_clock import SetupClock, process_age_s, setup_line

    stat, uptime = tmp_path / "stat", tmp_path / "uptime"
    # pid (comm with ') ' inside) state ppid ... field 22 = starttime in clock ticks since boot
    ticks = 500 * os.sysconf("SC_CLK_TCK")  # began 500 s after the boot
    stat.write_text("123 (py) thon) S " + " ".join(["0"] * 18) + f" {ticks} 0 0\n")
    uptime.write_text("512.25 1000.00\n")
    assert process_age_s(stat, uptime) == 12.25
    assert process_age_s(tmp_path / "missing", uptime) is None
    began = time.monotonic()
    time.sleep(0.2)
    age = process_age_s()  # this process's own: older than this test, younger than the machine
    since_boot = float(Path("/proc/uptime").read_text().split()[0])
    assert age is not None and time.monotonic() - began - 0.02 <= age <= since_boot
    clock = SetupClock(age_s=2.0)
    with clock.phase("session"):
        pass
    record = clock.record()
    assert record["before_trial_s"] == 2.0 and list(record) == [
        "before_trial_s",
        "session_s",
        "total_s",
    ]
    assert setup_line({"before_trial_s": 1.0, "session_s": 0.5, "total_s": 1.5}) == (
        "1.50 s: before_trial 1.00, session 0.50"
    )
