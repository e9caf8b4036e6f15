"""scripts/bench/harness.py: the order of interleaved runs, the per-pair ratios and their spread,
the paired interval and the printed table, on made-up numbers."""

from __future__ import annotations

import math
import sys

import pytest

from scripts.bench import harness as h


@pytest.mark.parametrize(
    ("index", "arms", "order"),
    [
        (0, ("a", "b"), ["a", "b"]),
        (1, ("a", "b"), ["b", "a"]),
        (2, ("a", "b"), ["a", "b"]),
        (3, (1, 2, 3), [3, 2, 1]),
        (0, ("only",), ["only"]),
    ],
)
def test_pairs_alternate_which_arm_goes_first(index, arms, order) -> None:
    assert h.pair_order(index, arms) == order


def test_run_pairs_runs_each_arm_once_a_pair_in_the_alternating_order() -> None:
    calls, seen = [], []
    pairs = h.run_pairs(
        ("a", "b"),
        3,
        lambda arm, i: calls.append((arm, i)) or f"{arm}{i}",
        after_pair=lambda i, got: seen.append((i, list(got))),
    )
    assert calls == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert pairs == [{"a": "a0", "b": "b0"}, {"a": "a1", "b": "b1"}, {"a": "a2", "b": "b2"}]
    assert seen == [(0, ["a", "b"]), (1, ["b", "a"]), (2, ["a", "b"])]  # each pair as it ran
    with pytest.raises(ValueError, match="--pairs must be at least 1"):
        h.run_pairs(("a", "b"), 0, lambda arm, i: None)


def test_shuffled_rounds_hold_every_arm_once_and_repeat_with_the_seed() -> None:
    rounds = h.shuffled_rounds("abcd", 20, seed=3)
    assert len(rounds) == 20 and all(sorted(r) == list("abcd") for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # shuffled, not one fixed order
    assert rounds == h.shuffled_rounds("abcd", 20, seed=3)
    assert rounds != h.shuffled_rounds("abcd", 20, seed=4)


@pytest.mark.parametrize(
    ("values", "fmt", "text"),
    [
        ([2.0, 1.0, 4.0], "{:.2f}", "2.00 (1.00-4.00)"),
        ([3.0], "{:.1f}", "3.0 (3.0-3.0)"),
        ([1.0, 2.0, 3.0, 10.0], "{:.1f}", "2.5 (1.0-10.0)"),  # the median of an even count
        ([12.345, 13.0], "{:.2f}%", "12.67% (12.35%-13.00%)"),
    ],
)
def test_spread_is_the_median_and_the_range(values, fmt, text) -> None:
    assert h.spread(values, fmt) == text


@pytest.mark.parametrize(
    ("num", "den", "ratios", "summary"),
    [
        (
            [2.0, 3.0, 4.0],
            [1.0, 2.0, 4.0],
            [2.0, 1.5, 1.0],
            "median 1.50x (range 1.00-2.00, 3 pairs)",
        ),
        ([1.0], [4.0], [0.25], "median 0.25x (range 0.25-0.25, 1 pairs)"),
    ],
)
def test_ratios_are_taken_pair_by_pair(num, den, ratios, summary) -> None:
    assert h.pair_ratios(num, den) == ratios
    assert h.ratio_summary(ratios) == summary


def test_pair_ratios_refuse_arms_of_different_lengths_and_summaries_need_a_ratio() -> None:
    with pytest.raises(ValueError, match="2 numerators and 1 denominators"):
        h.pair_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least one"):
        h.ratio_summary([])
    with pytest.raises(ValueError, match="at least one"):
        h.spread([])
    assert h.ratio_summary([1.0, 1.5], "{:.3f}", unit="rounds").endswith("2 rounds)")


@pytest.mark.parametrize(
    ("q", "value"), [(0.0, 1.0), (0.1, 1.0), (0.5, 3.0), (0.9, 5.0), (1.0, 5.0)]
)
def test_quantile_is_one_of_the_values(q, value) -> None:
    assert h.quantile([5.0, 1.0, 3.0, 2.0, 4.0], q) == value


def test_quantile_refuses_no_values_or_a_q_outside_0_1() -> None:
    with pytest.raises(ValueError, match=r"q=1\.5"):
        h.quantile([1.0], 1.5)
    with pytest.raises(ValueError, match="0 values"):
        h.quantile([], 0.5)


def test_paired_interval_is_the_geometric_mean_ratio_with_a_t_interval() -> None:
    a, b = [1.1, 2.2, 3.3], [1.0, 2.0, 3.0]
    exact = h.paired_interval(a, b)  # every pair exactly 1.1: no spread, a zero-width interval
    assert exact.ratio == pytest.approx(1.1) and exact.pairs == 3
    assert exact.low == pytest.approx(1.1) and exact.high == pytest.approx(1.1)
    noisy = h.paired_interval([1.0, 1.2, 1.1, None], [1.0, 1.0, 1.0, 1.0])  # None: a failed run
    assert noisy.pairs == 3
    assert noisy.ratio == pytest.approx(math.exp(sum(math.log(x) for x in (1.0, 1.2, 1.1)) / 3))
    assert noisy.low < noisy.ratio < noisy.high
    wider = h.paired_interval([1.0, 1.2, 1.1], [1.0, 1.0, 1.0], confidence=0.99)
    assert wider.low < noisy.low and wider.high > noisy.high
    one = h.paired_interval([2.0], [1.0])
    assert (one.ratio, one.low, one.high) == (2.0, 0.0, math.inf)  # one pair bounds nothing
    assert h.paired_interval([None], [1.0]).pairs == 0


def test_the_table_pads_each_column_to_its_widest_cell() -> None:
    assert h.format_table(["arm", "tokens/s"], [["auto", "1,234"], ["off", "99"]]) == (
        "| arm  | tokens/s |\n|------|----------|\n| auto | 1,234    |\n| off  | 99       |"
    )


def test_timed_and_run_child_measure_what_they_ran(tmp_path) -> None:
    value, seconds = h.timed(lambda: sum(range(1000)))
    assert value == 499500 and seconds >= 0
    child = h.run_child([sys.executable, "-c", "import time; time.sleep(0.2); print('ok')"])
    assert child.proc.returncode == 0 and child.output.strip() == "ok"
    assert child.wall_s >= 0.2
    argv = h.sweep_argv("search=smoke")
    assert argv[1:] == [str(h.REPO / "sweep.py"), "-m", "search=smoke"]
    assert h.trial_argv("model=tiny")[1:] == ["-m", "train.trial", "model=tiny"]


def test_run_or_stop_keeps_the_log_and_stops_on_a_failed_child(tmp_path) -> None:
    ok = h.run_or_stop(
        [sys.executable, "-c", "print('ran')"], cwd=tmp_path, log_name="ok.log", what="sweep a"
    )
    assert ok.proc.returncode == 0 and (tmp_path / "ok.log").read_text() == "ran\n"
    failing = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(SystemExit, match=r"^sweep b failed \(exit 3\); see .*bad\.log$"):
        h.run_or_stop(failing, cwd=tmp_path, log_name="bad.log", what="sweep b")
    assert (tmp_path / "bad.log").read_text() == "boom\n"  # kept for the reader


def test_the_parser_adds_pairs_and_a_workdir_where_asked(tmp_path) -> None:
    both = h.bench_parser("Title line.\n\nMore.", pairs=3, arms="a and b", workdir=True)
    assert both.description == "Title line."
    args = both.parse_args([])
    assert (args.pairs, args.workdir) == (3, None)
    assert both.parse_args(["--pairs", "5", "--workdir", str(tmp_path)]).workdir == tmp_path
    assert "interleaved pairs of a and b" in both.format_help()
    bare = h.bench_parser("Title.").parse_args([])
    assert not hasattr(bare, "pairs") and not hasattr(bare, "workdir")
    made = h.workdir_of(both.parse_args(["--workdir", str(tmp_path / "new")]), "unused-")
    assert made == tmp_path / "new" and made.is_dir()


def test_verdict_words() -> None:
    assert (h.verdict(True), h.verdict(False)) == ("PASS", "FAIL")
