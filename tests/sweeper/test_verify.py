"""Noise-aware winner selection: decisive leads, ties resolved by simplicity, R=1, errors."""

from __future__ import annotations

import statistics

import pytest

from sweeper.report.verdict_text import verdict_text
from sweeper.verify.winner import Candidate, coefficient_of_variation, pick_winner


def _cand(
    key: str, values: list[float], *, simplicity: int = 1, overrides: list[str] | None = None
) -> Candidate:
    return Candidate(
        key=key,
        params={},
        overrides=overrides if overrides is not None else [key],
        values=values,
        simplicity=simplicity,
    )


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], 0.0),
        ([5.0], 0.0),
        ([2.0, 2.0, 2.0], 0.0),
        ([9.0, 11.0], statistics.stdev([9.0, 11.0]) / 10.0),  # sample std: sqrt(2)/10
        ([0.0, 0.0], 0.0),  # zero mean: no CV rather than a division by zero
    ],
)
def test_coefficient_of_variation(values: list[float], expected: float) -> None:
    assert coefficient_of_variation(values) == pytest.approx(expected)


# (name, candidates, direction, expected winner key, decisive)
CASES = [
    (
        "clear lead, maximize",
        [_cand("a", [100, 101, 99]), _cand("b", [120, 121, 119])],
        "maximize",
        "b",
        True,
    ),
    (
        "clear lead, minimize",
        [_cand("a", [100, 101, 99]), _cand("b", [120, 121, 119])],
        "minimize",
        "a",
        True,
    ),
    (
        # 2% apart, CVs ~2%: noise band 2 * 2% = 4% > gap; simpler 'a' exported
        "tie within noise, simpler wins",
        [_cand("a", [98, 100, 102], simplicity=1), _cand("b", [100, 102, 104], simplicity=3)],
        "maximize",
        "a",
        False,
    ),
    (
        "tie, best is also simplest",
        [_cand("a", [98, 100, 102], simplicity=3), _cand("b", [100, 102, 104], simplicity=1)],
        "maximize",
        "b",
        False,
    ),
    (
        # gap 0.5% beats a zero CV but not the 1% floor
        "zero spread, below the floor",
        [_cand("a", [200.0, 200.0], simplicity=0), _cand("b", [201.0, 201.0], simplicity=2)],
        "maximize",
        "a",
        False,
    ),
    (
        "zero spread, above the floor",
        [_cand("a", [200.0, 200.0], simplicity=0), _cand("b", [205.0, 205.0], simplicity=2)],
        "maximize",
        "b",
        True,
    ),
    (
        "tie in minimize: simpler slower one wins",
        [_cand("fast", [10.0, 10.1], simplicity=4), _cand("plain", [10.05, 10.1], simplicity=0)],
        "minimize",
        "plain",
        False,
    ),
    (
        "equally simple: lighter compile mode wins the tie",
        [
            _cand("heavy", [100, 101], overrides=["runtime.compile=max-autotune"]),
            _cand("light", [100.5, 100], overrides=["runtime.compile=default"]),
        ],
        "maximize",
        "light",
        False,
    ),
    (
        "equally simple and light: fewer data workers",
        [
            _cand("w4", [100, 101], overrides=["data.num_workers=4"]),
            _cand("w1", [100.2, 100.1], overrides=["data.num_workers=1"]),
        ],
        "maximize",
        "w1",
        False,
    ),
    (
        "equally simple and light: better median",
        [_cand("z", [100.5, 100.6], overrides=[]), _cand("a", [100.0, 100.1], overrides=[])],
        "maximize",
        "z",
        False,
    ),
    (
        "three candidates, third outside the noise of the best",
        [
            _cand("a", [100, 100.5], simplicity=2),
            _cand("b", [100.3, 100.4], simplicity=0),
            _cand("c", [80, 81], simplicity=-1),
        ],
        "maximize",
        "b",
        False,
    ),
    (
        "single candidate",
        [_cand("only", [5.0, 5.1])],
        "maximize",
        "only",
        True,
    ),
    (
        "empty candidates ignored",
        [_cand("none", [], simplicity=0), _cand("a", [5.0]), _cand("b", [9.0])],
        "maximize",
        "b",
        True,
    ),
]


@pytest.mark.parametrize(
    ("candidates", "direction", "winner", "decisive"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_pick_winner_table(
    candidates: list[Candidate], direction: str, winner: str, decisive: bool
) -> None:
    verdict = pick_winner(candidates, direction=direction)
    assert verdict.winner.key == winner
    assert verdict.decisive is decisive
    assert (verdict.kind in ("decisive", "only_one")) is decisive
    assert verdict_text(verdict)
    medians = [r["median"] for r in verdict.ranking]
    assert medians == sorted(medians, reverse=direction == "maximize")


def test_winner_is_the_callers_object() -> None:
    cands = [_cand("a", [1.0]), _cand("b", [2.0])]
    assert pick_winner(cands, direction="maximize").winner is cands[1]


def test_ranking_rows() -> None:
    verdict = pick_winner(
        [_cand("a", [98, 100, 102]), _cand("b", [50, 51]), _cand("skip", [])],
        direction="maximize",
    )
    assert [r["key"] for r in verdict.ranking] == ["a", "b"]
    top = verdict.ranking[0]
    assert (top["median"], top["min"], top["max"], top["n"]) == (100, 98, 102, 3)
    assert top["cv"] == pytest.approx(0.02)
    assert top["within_noise_of_best"] is True
    assert verdict.ranking[1]["within_noise_of_best"] is False


def test_tie_reason_names_numbers_and_the_simpler_config() -> None:
    verdict = pick_winner(
        [_cand("a", [98, 100, 102], simplicity=1), _cand("b", [100, 102, 104], simplicity=3)],
        direction="maximize",
    )
    # 2/102 = 2.0% apart, CVs 2.0% / 1.96%
    assert verdict.kind == "tied_simpler" and verdict.medians is not None
    assert [s.candidate.key for s in verdict.medians.tied] == ["b", "a"]
    assert verdict.medians.apart == pytest.approx(2 / 102)
    assert "top 2 are within noise (2.0% apart, CV 2.0%/2.0%" in verdict_text(verdict)
    assert "exporting the simpler config 'a'" in verdict_text(verdict)


def test_decisive_reason_reports_lead_noise_and_overlap() -> None:
    # medians 100 vs 112 beat 2 x CV(4.0%) x 112 = 9.0, yet one outlier makes the ranges overlap
    verdict = pick_winner(
        [_cand("a", [100, 100, 100, 100, 100, 110]), _cand("b", [109, 112, 112, 112, 112, 112])],
        direction="maximize",
    )
    assert verdict.decisive
    assert verdict.kind == "decisive" and verdict.medians is not None
    assert verdict.medians.overlap and verdict.medians.runner_up is not None
    assert verdict.medians.runner_up.candidate.key == "a"
    assert "'b' wins decisively" in verdict_text(verdict)
    assert "overlap" in verdict_text(verdict) and "do not overlap" not in verdict_text(verdict)
    separated = pick_winner([_cand("a", [100, 101]), _cand("b", [200, 201])], direction="maximize")
    assert separated.medians is not None and not separated.medians.overlap
    assert "do not overlap" in verdict_text(separated)


@pytest.mark.parametrize(
    ("values_a", "values_b", "decisive"),
    [
        ([100.0], [100.9], False),  # 0.9% < 1% floor
        ([100.0], [101.5], True),  # 1.5% > 1% floor (no CV at R=1)
    ],
)
def test_single_measurement_uses_the_floor(
    values_a: list[float], values_b: list[float], decisive: bool
) -> None:
    verdict = pick_winner(
        [_cand("a", values_a, simplicity=0), _cand("b", values_b, simplicity=1)],
        direction="maximize",
    )
    assert verdict.decisive is decisive
    assert verdict.medians is not None and verdict.medians.floor_only == 0.01
    assert "CV is unknown" in verdict_text(verdict)


def test_noise_floor_is_a_parameter() -> None:
    cands = [_cand("a", [100.0], simplicity=0), _cand("b", [103.0], simplicity=1)]
    assert pick_winner(cands, direction="maximize", noise_floor=0.01).winner.key == "b"
    assert pick_winner(cands, direction="maximize", noise_floor=0.05).winner.key == "a"


def test_mixed_repeats_use_the_known_cv() -> None:
    # 'a' has a 5% CV; 'b' has one value. Gap 4% < 2 * 5%: tied, simpler 'a' wins.
    a = _cand("a", [95.0, 100.0, 105.0], simplicity=0)
    b = _cand("b", [104.0], simplicity=1)
    verdict = pick_winner([a, b], direction="maximize")
    assert verdict.winner is a
    assert not verdict.decisive


@pytest.mark.parametrize(
    ("candidates", "kwargs", "match"),
    [
        ([], {"direction": "maximize"}, "no candidate has a measured value"),
        ([_cand("a", [])], {"direction": "maximize"}, "no candidate has a measured value"),
        ([_cand("a", [1.0])], {"direction": "up"}, "direction must be"),
        ([_cand("a", [1.0])], {"direction": "maximize", "noise_floor": -0.1}, "noise_floor"),
    ],
)
def test_errors(candidates: list[Candidate], kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pick_winner(candidates, **kwargs)
