"""scripts/bench/setup.py's report: each phase per revision, '-' where a revision has no such
phase (an older record's one `session` against today's parts), and the per-pair ratio of the
totals."""

from __future__ import annotations

from scripts.bench.setup import report


def test_the_report_shows_each_revisions_own_phases() -> None:
    before = [
        {"before_trial_s": 4.0, "session_s": 6.0, "total_s": 10.0},
        {"before_trial_s": 4.0, "session_s": 4.0, "total_s": 8.0},
    ]
    after = [
        {"before_trial_s": 4.0, "model_s": 1.0, "data_s": 0.0, "total_s": 5.0},
        {"before_trial_s": 3.0, "model_s": 1.0, "data_s": 0.0, "total_s": 4.0},
    ]
    text = report({"before": before, "after": after}, title="t")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("|")}
    assert [c.strip() for c in rows["session"].split("|")[2:4]] == ["5.00 (4.00-6.00)", "-"]
    assert [c.strip() for c in rows["model"].split("|")[2:4]] == ["-", "1.00 (1.00-1.00)"]
    assert "total" in rows and list(rows)[-1] == "total"
    assert text.endswith("total before / after: median 2.00x (range 2.00-2.00, 2 pairs)")
