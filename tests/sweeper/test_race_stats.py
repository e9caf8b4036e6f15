import math
import random
import statistics

import pytest

from sweeper.verify.race_stats import EQUIVALENT, FASTER, OPEN, SLOWER, compare, log_ratios


def _drifting(gap: float, rounds: int, seed: int) -> tuple[list[float], list[float]]:
    """Machine speed drifts 30% over rounds; the contender is `gap` faster; order noise."""
    rng = random.Random(seed)
    fast, slow = [], []
    for r in range(rounds):
        machine = 1000.0 * (1.3 - 0.3 * r / (rounds - 1))
        order = rng.choice((0.98, 1.02))
        fast.append(machine * (1 + gap) * order * rng.gauss(1, 0.005))
        slow.append(machine / order * rng.gauss(1, 0.005))
    return fast, slow


def test_pairing_sees_a_5pct_gap_through_30pct_drift() -> None:
    fast, slow = _drifting(0.05, 8, seed=1)
    # a median comparison of the unpaired runs: drift swamps the gap, the interval of means overlaps
    assert statistics.stdev(slow) / statistics.mean(slow) > 0.05
    result = compare(fast, slow, confidence=0.95)
    assert result.decision == FASTER
    assert result.low > 1.0 and 1.0 < result.ratio < 1.1
    assert compare(slow, fast).decision == SLOWER


def test_median_is_fooled_by_drift_when_rounds_are_unbalanced() -> None:
    # the slower config measured early (fast machine), the faster late (slow machine)
    slow = [1300.0, 1290.0, 1280.0]
    fast = [1050.0 * 1.05, 1040.0 * 1.05, 1030.0 * 1.05]
    assert statistics.median(fast) < statistics.median(slow)
    paired_slow = [1050.0, 1040.0, 1030.0]
    assert compare(fast, paired_slow).decision == FASTER


@pytest.mark.parametrize(
    ("contender", "leader", "decision"),
    [
        ([100.0, 101.0, 99.0, 100.5], [100.2, 100.8, 99.1, 100.4], EQUIVALENT),
        ([100.0, 130.0], [110.0, 100.0], OPEN),
        ([100.0], [90.0], OPEN),
        # 0.5% slower in every round: significant, but within the margin, so equivalent
        ([99.5, 99.49, 99.51, 99.5], [100.0, 100.0, 100.0, 100.0], EQUIVALENT),
        ([95.0, 94.9, 95.1, 95.0], [100.0, 100.0, 100.0, 100.0], SLOWER),
    ],
)
def test_decisions(contender: list[float], leader: list[float], decision: str) -> None:
    assert compare(contender, leader, margin=0.02).decision == decision


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(ValueError, match="rounds"):
        log_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"verify\.confidence"):
        compare([1.0, 2.0], [1.0, 2.0], confidence=1.5)
    assert math.isclose(log_ratios([2.0], [1.0])[0], math.log(2))
