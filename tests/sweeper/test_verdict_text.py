"""The race's verdict is data (its kind and numbers, sweeper/verify/winner.py); its sentence is
written once, by sweeper/report/verdict_text.py, for every place that shows it."""

from __future__ import annotations

import logging

import optuna
import pytest

from sweeper.report.verdict_text import record_verdict, verdict_text, winner_text
from sweeper.verify.race_rules import DECIDED, TIED, Standing
from sweeper.verify.race_stats import Comparison
from sweeper.verify.stage import Winner
from sweeper.verify.winner import Candidate, Verdict, pick_winner, race_verdict

LEAD = Comparison(ratio=1.12, low=1.05, high=1.19, rounds=6, confidence=0.95, decision="faster")


def _c(key: str, values: list[float], simplicity: int = 0, overrides=()) -> Candidate:
    return Candidate(
        key=key, params={}, overrides=list(overrides), values=values, simplicity=simplicity
    )


MEDIAN_CASES = [
    (
        "only_one",
        [_c("a", [100.0])],
        "maximize",
        "Only one candidate was measured ('a', median 100, n=1); exporting it without a "
        "comparison. Only one measurement per candidate, so the CV is unknown; the noise is the "
        "1.0% floor alone.",
    ),
    (
        "tied_best",
        [_c("a", [100.0, 102.0], 0), _c("b", [99.0, 101.0], 1)],
        "maximize",
        "The top 2 are within noise (1.0% apart, CV 1.4%/1.4%; medians 101, 100); 'a' has the "
        "best median and is also the simplest, exporting it.",
    ),
    (
        "tied_lighter",
        [
            _c("a", [101.0, 103.0], 1, ["runtime.compile=max-autotune"]),
            _c("b", [100.0, 102.0], 1, ["runtime.compile=default"]),
        ],
        "maximize",
        "The top 2 are within noise (1.0% apart, CV 1.4%/1.4%; medians 102, 101); equally "
        "simple, so exporting 'b', which uses a lighter compile mode or fewer data workers than "
        "the best median 'a'.",
    ),
    (
        "decisive",
        [_c("a", [10.0]), _c("b", [12.0])],
        "minimize",
        "'a' wins decisively: median 10 vs 12 for the runner-up 'b' (20.0% lower, beyond the "
        "noise of 1.0%; CV unknown); their ranges [10, 10] and [12, 12] do not overlap. Only one "
        "measurement per candidate, so the CV is unknown; the noise is the 1.0% floor alone.",
    ),
]


@pytest.mark.parametrize(
    ("kind", "cands", "direction", "words"), MEDIAN_CASES, ids=[c[0] for c in MEDIAN_CASES]
)
def test_a_ranking_by_median_is_said_from_its_kind_and_numbers(kind, cands, direction, words):
    verdict = pick_winner(cands, direction=direction)
    assert verdict.kind == kind and verdict.race is None and verdict.medians is not None
    assert verdict_text(verdict) == words


def _race() -> dict[int, Candidate]:
    return {0: _c("start", [100.0, 101.0]), 4: _c("x", [110.0, 111.0], 1), 5: _c("y", [], 2)}


def test_a_won_race_is_said_with_the_winners_lead_over_the_start() -> None:
    standing = Standing(
        leader=4,
        alive=(4,),
        dropped={0: 3},
        against_leader={},
        rounds=3,
        finished=True,
        outcome=DECIDED,
    )
    verdict = race_verdict(_race(), standing, direction="maximize", noise_floor=0.01)
    assert verdict.kind == "race_won" and verdict.race is not None
    assert (verdict.race.chosen, verdict.race.dropped, verdict.race.failed) == (4, ((0, 3),), (5,))
    said = (
        "trial 4 wins the race after 3 rounds: every other contender was proved slower (trial 0 "
        "after round 3) or failed every run (trial 5)"
    )
    assert verdict_text(verdict) == said + "."
    assert verdict_text(verdict, lead=LEAD) == (
        f"{said}; lead over the starting config 1.12x (95% CI 1.05x-1.19x, 6 rounds)."
    )


def test_an_equivalent_race_names_the_simplest_and_the_dropped() -> None:
    open_pair = Comparison(
        ratio=0.99, low=0.97, high=1.01, rounds=3, confidence=0.95, decision="open"
    )
    standing = Standing(
        leader=4,
        alive=(4, 0),
        dropped={5: 2},
        against_leader={0: open_pair},
        rounds=3,
        finished=True,
        outcome=TIED,
    )
    verdict = race_verdict(_race(), standing, direction="maximize", noise_floor=0.01)
    assert verdict.kind == "race_equivalent" and verdict.race is not None
    assert (verdict.race.chosen, verdict.race.survivors) == (0, 2)
    assert verdict_text(verdict) == (
        "after 3 rounds the 2 survivors are equivalent (each within the margin of the leader); "
        "exporting the simplest, trial 0 (dropped as slower: trial 5 after round 2)."
    )


def test_a_verdict_without_its_numbers_is_refused() -> None:
    won = _c("a", [1.0])
    with pytest.raises(ValueError, match="neither medians nor a race"):
        verdict_text(Verdict(winner=won, ranking=[], decisive=True, kind="decisive"))


def test_the_studys_record_and_sweep_log_carry_the_same_sentence(caplog) -> None:
    """The study's "verdict" record (read by scripts/acceptance/evidence.py), sweep.log, the
    story's `race:` line, MLflow's tag and best.yaml all say `winner_text(winner)`."""
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    won = _c("a", [100.0, 101.0])
    standing = Standing(
        leader=0,
        alive=(0,),
        dropped={},
        against_leader={},
        rounds=2,
        finished=True,
        outcome=DECIDED,
    )
    verdict = race_verdict({0: won}, standing, direction="maximize", noise_floor=0.01)
    winner = Winner(
        number=0,
        trial=study.trials[0],
        candidate=won,
        verdict=verdict,
        results=[],
        outcome=DECIDED,
        rounds=2,
        lead_over_start=LEAD,
    )
    with caplog.at_level(logging.DEBUG, logger="sweeper.report.verdict_text"):
        record_verdict(study, winner)
    said = (
        "only trial 0 was measured, in 2 rounds: nothing to race; lead over the starting config "
        "1.12x (95% CI 1.05x-1.19x, 6 rounds)."
    )
    assert winner_text(winner) == said
    assert study.user_attrs["verdict"] == {
        "winner_trial": 0,
        "reason": said,
        "decisive": True,
        "outcome": DECIDED,
        "rounds": 2,
        "lead_over_start": {
            "ratio": 1.12,
            "low": 1.05,
            "high": 1.19,
            "rounds": 6,
            "confidence": 0.95,
            "decision": "faster",
        },
    }
    assert f"verdict: {said}" in caplog.text
