"""The verification race's judge (sweeper/verify/race_rules.py) on fake measurements: who is
dropped, when the race ends, and drift that a comparison of medians gets wrong and the paired test
gets right."""

from __future__ import annotations

import random
import re

import pytest

from sweeper.report.verdict_text import verdict_text
from sweeper.settings import VerifyConf, check_race
from sweeper.verify.race_rules import (
    DECIDED,
    TIED,
    UNDECIDED,
    interval_text,
    judge,
    lead,
    round_order,
    speed,
)
from sweeper.verify.winner import Candidate, pick_winner, race_verdict

RULES = VerifyConf(repeats=3, max_rounds=8, confidence=0.95, margin=0.02)
# a machine whose speed swings by +-40% from round to round, the same for every run of a round
DRIFT = [1.0, 0.6, 1.4, 0.7, 1.3, 0.8, 1.2, 0.9]


def _noisy(base: float, rounds: int, *, jitter: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [base * DRIFT[i] * (1 + rng.uniform(-jitter, jitter)) for i in range(rounds)]


def _standing(speeds, rules=RULES, **kw):
    return judge(speeds, alive=list(speeds), dropped={}, rules=rules, **kw)


def test_drift_a_median_comparison_cannot_separate_is_decided_by_pairs() -> None:
    """5% faster on a machine drifting +-40%: the medians are within each other's noise (the
    simpler, slower config would be exported), the paired rounds prove the lead in 3 rounds."""
    fast, slow = _noisy(105.0, 3, jitter=0.005, seed=1), _noisy(100.0, 3, jitter=0.005, seed=2)
    by_median = pick_winner(
        [
            Candidate(key="fast", params={}, overrides=[], values=fast, simplicity=1),
            Candidate(key="slow", params={}, overrides=[], values=slow, simplicity=0),
        ],
        direction="maximize",
    )
    assert not by_median.decisive and by_median.winner.key == "slow"
    s = _standing({1: fast, 2: slow})
    assert (s.outcome, s.leader, s.alive, dict(s.dropped)) == (DECIDED, 1, (1,), {2: 3})


@pytest.mark.parametrize(
    ("gap", "jitter", "outcome", "alive"),
    [
        (1.10, 0.01, DECIDED, (1,)),  # a clear 10% lead: the slower is dropped after round 3
        (1.00, 0.002, TIED, (1, 2)),  # the same config twice: equivalent within the 2% margin
    ],
)
def test_outcomes_after_the_minimum_rounds(gap, jitter, outcome, alive) -> None:
    s = _standing(
        {
            1: _noisy(100.0 * gap, 3, jitter=jitter, seed=3),
            2: _noisy(100.0, 3, jitter=jitter, seed=4),
        }
    )
    assert s.outcome == outcome and s.finished and s.rounds == 3
    assert sorted(s.alive) == sorted(alive)


def test_nothing_is_dropped_before_the_minimum_rounds() -> None:
    s = _standing({1: [110.0, 111.0], 2: [100.0, 100.5]})
    assert (s.finished, s.alive, dict(s.dropped)) == (False, (1, 2), {})


def test_open_until_the_round_limit_then_not_significant() -> None:
    rng = random.Random(5)
    # a 1% gap under 10% independent noise: the test stays open
    a = [101 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(8)]
    b = [100 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(8)]
    assert not _standing({1: a[:5], 2: b[:5]}).finished
    s = _standing({1: a, 2: b})
    assert (s.finished, s.outcome, len(s.alive)) == (True, UNDECIDED, 2)
    assert _standing({1: a[:5], 2: b[:5]}, out_of_budget=True).outcome == UNDECIDED


def test_failed_runs_are_left_out_of_the_pairs() -> None:
    s = _standing({1: [110.0, None, 111.0, 110.5], 2: [100.0, 100.2, None, 100.1]})
    assert s.outcome == DECIDED and s.alive == (1,)
    assert s.against_leader == {}


def test_three_contenders_drop_one_and_race_on() -> None:
    a = _noisy(100.0, 3, jitter=0.003, seed=6)
    b = _noisy(100.5, 3, jitter=0.003, seed=7)  # within the margin of a
    c = _noisy(80.0, 3, jitter=0.003, seed=8)  # clearly slower
    s = _standing({1: a, 2: b, 3: c})
    assert 3 in s.dropped and s.outcome == TIED and sorted(s.alive) == [1, 2]


def test_a_time_objective_is_inverted() -> None:
    assert speed(2.0, maximize=False) == 0.5 and speed(2.0, maximize=True) == 2.0
    with pytest.raises(ValueError, match="finite values > 0"):
        speed(0.0, maximize=True)


def test_lead_over_the_start_with_its_interval() -> None:
    w, s = _noisy(112.0, 6, jitter=0.01, seed=9), _noisy(100.0, 6, jitter=0.01, seed=10)
    c = lead(w, s, rules=RULES)
    assert c is not None and c.low < 1.12 < c.high and c.low > 1.0
    assert re.fullmatch(r"1\.1\dx \(95% CI 1\.\d\dx-1\.\d\dx, 6 rounds\)", interval_text(c))
    assert lead([110.0], [100.0], rules=RULES) is None


@pytest.mark.parametrize(
    ("contender", "leader", "said"),
    [
        ([138.0], [100.0], "1.38x (no interval: 1 round)"),
        ([], [], "1.00x (no interval: 0 rounds)"),
        # two rounds that disagree: a t interval of 0.00x-57729952.90x is no result
        ([963.0, 23820.0], [697.0, 697.0], "6.87x (no interval: 2 rounds disagree too much)"),
        ([110.0, 112.0, 111.0], [100.0, 100.0, 100.0], "1.11x (95% CI 1.09x-1.14x, 3 rounds)"),
    ],
)
def test_an_interval_that_says_nothing_is_named_with_its_reason(contender, leader, said) -> None:
    from sweeper.verify.race_stats import compare

    c = compare(contender, leader)
    assert interval_text(c) == said
    assert "e+" not in interval_text(c) and "0.00x" not in interval_text(c)


def test_round_order_is_a_shuffle_fixed_by_seed_and_round() -> None:
    orders = {tuple(round_order([1, 2, 3, 4], seed=0, round_index=r)) for r in range(20)}
    assert len(orders) > 1 and all(sorted(o) == [1, 2, 3, 4] for o in orders)
    assert round_order([1, 2, 3], seed=5, round_index=2) == round_order(
        [1, 2, 3], seed=5, round_index=2
    )


@pytest.mark.parametrize(
    ("rules", "match"),
    [
        ({"repeats": 0}, "verify.repeats=0: a race needs at least 1 round"),
        ({"repeats": 4, "max_rounds": 3}, "verify.max_rounds=3 is below verify.repeats=4"),
        ({"confidence": 1.0}, r"verify.confidence=1.0: use a value in \[0.5, 1\)"),
        ({"margin": -0.1}, r"verify.margin=-0.1: use a share in \[0, 0.5\)"),
        ({"within": 0.0}, r"verify.within=0.0: use a share in \(0, 1\]"),
        ({"within": 1.5}, r"verify.within=1.5: use a share in \(0, 1\]"),
    ],
)
def test_rules_refuse_a_race_that_cannot_run(rules, match) -> None:
    with pytest.raises(ValueError, match=match):
        check_race(VerifyConf(**rules))


def _cand(key: str, values: list[float], simplicity: int) -> Candidate:
    return Candidate(key=key, params={}, overrides=[], values=values, simplicity=simplicity)


def test_verdict_names_how_the_race_ended() -> None:
    fast, slow = _noisy(110.0, 3, jitter=0.005, seed=11), _noisy(100.0, 3, jitter=0.005, seed=12)
    cands = {4: _cand("fast", fast, 2), 0: _cand("start", slow, 0)}
    v = race_verdict(cands, _standing({4: fast, 0: slow}), direction="maximize", noise_floor=0.01)
    assert v.winner is cands[4] and v.decisive
    assert v.kind == "race_won" and v.race is not None and v.race.dropped == ((0, 3),)
    assert verdict_text(v).startswith("trial 4 wins the race after 3 rounds")
    assert "trial 0 after round 3" in verdict_text(v)

    same = {4: _cand("a", slow, 2), 0: _cand("start", [x * 1.001 for x in slow], 0)}
    v = race_verdict(
        same,
        _standing({n: c.values for n, c in same.items()}),
        direction="maximize",
        noise_floor=0.01,
    )
    assert v.winner is same[0] and not v.decisive  # the simplest among equivalents
    assert v.kind == "race_equivalent" and v.race is not None and v.race.chosen == 0
    assert "survivors are equivalent" in verdict_text(v)


def test_an_undecided_verdict_says_what_would_separate() -> None:
    rng = random.Random(13)
    a = [101 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(8)]
    b = [100 * (1 + rng.uniform(-0.1, 0.1)) for _ in range(8)]
    cands = {1: _cand("a", a, 1), 2: _cand("b", b, 0)}
    s = _standing({1: a, 2: b})
    v = race_verdict(cands, s, direction="maximize", noise_floor=0.01)
    other = 3 - s.leader
    assert not v.decisive
    assert v.kind == "race_open" and v.race is not None
    assert [n for n, _ in v.race.open_pairs] == [other]
    assert verdict_text(v).startswith(
        f"not significant after 8 rounds: trial {s.leader} over trial {other}"
    )
    assert v.winner is cands[s.leader]  # the leader: the best estimate, said to be no proven win
    text = verdict_text(v)
    assert "95% CI" in text and "hydra.sweeper.verify.max_rounds" in text
    assert "quieter machine" in text


def test_the_lead_becomes_the_parent_runs_metrics() -> None:
    from sweeper.metrics import lead_metrics
    from sweeper.verify.race_stats import Comparison

    c = Comparison(ratio=1.12, low=1.05, high=1.19, rounds=6, confidence=0.95, decision="faster")
    assert lead_metrics(c) == {
        "best/lead_over_start": 1.12,
        "best/lead_over_start_low": 1.05,
        "best/lead_over_start_high": 1.19,
    }
    assert lead_metrics(None) == {}


def test_a_race_of_one_says_there_was_nothing_to_race() -> None:
    cands = {0: _cand("start", [100.0, 101.0], 0), 3: _cand("x", [], 1)}  # trial 3 always failed
    s = judge({0: [100.0, 101.0], 3: [None, None]}, alive=[0, 3], dropped={}, rules=RULES)
    v = race_verdict(cands, s, direction="maximize", noise_floor=0.01)
    assert v.winner is cands[0]
    assert v.kind == "race_alone" and v.race is not None and v.race.failed == (3,)
    assert (
        verdict_text(v)
        == "only trial 0 was measured, in 2 rounds (trial 3 failed every run): nothing to race."
    )
