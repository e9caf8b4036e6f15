"""The race's judge: after each round, who is dropped, who leads and whether the race is over.

Pure and torch-free: it decides from numbers; the rounds that run the trials are
sweeper/verify/race_rounds.py, and its rules are the `verify` settings (`VerifyConf`), checked with
the rest (sweeper/settings.py). A round runs every surviving contender once, in fresh processes, in
a shuffled order, so the machine's drift hits both sides of a pair alike. After each round (from the
`repeats`-th on) every survivor is compared with the leader on the rounds they share
(sweeper/verify/race_stats.py `compare`): one proved slower with the chosen confidence is dropped.
The race ends when one contender survives, when every survivor is equivalent to the leader within
the margin, or when the rounds (or the wall budget) run out; then the verdict says the lead is not
significant and gives its interval.

Values are the objective in "higher is better" form (`speed`): tokens/s as they are, a time to
train inverted, so one test serves both directions.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweeper.verify.race_stats import EQUIVALENT, SLOWER, Comparison, compare

if TYPE_CHECKING:
    from sweeper.settings import VerifyConf  # the rules' numbers, checked with the settings

DECIDED = "decided"  # one survivor: the others were proved slower
TIED = "equivalent"  # every survivor within the margin of the leader
UNDECIDED = "not significant"  # rounds or budget spent with a survivor's test still open


@dataclass(frozen=True, kw_only=True)
class Standing:
    """The race after a round: who leads, who is still in, each survivor against the leader, and
    whether (and how) it is over."""

    leader: int
    alive: tuple[int, ...]
    dropped: Mapping[int, int]  # contender -> the round it was dropped after
    against_leader: Mapping[int, Comparison]  # every other survivor vs the leader
    rounds: int
    finished: bool
    outcome: str | None  # DECIDED, TIED or UNDECIDED once finished


def speed(value: float, *, maximize: bool) -> float:
    """The objective as higher-is-better: tokens/s as is, a time inverted."""
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"objective value {value!r}: a race needs finite values > 0")
    return value if maximize else 1.0 / value


def paired(a: Sequence[float | None], b: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """The rounds where both have a measurement (a failed or skipped run is None)."""
    pairs = [(x, y) for x, y in zip(a, b, strict=False) if x is not None and y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def mean_log(values: Sequence[float | None]) -> float:
    got = [math.log(v) for v in values if v is not None]
    return sum(got) / len(got) if got else -math.inf


def judge(
    speeds: Mapping[int, Sequence[float | None]],
    *,
    alive: Sequence[int],
    dropped: Mapping[int, int],
    rules: VerifyConf,
    out_of_budget: bool = False,
) -> Standing:
    """The standing after the last round in `speeds` (contender -> one speed or None a round).

    The leader is the survivor with the best geometric mean; from `repeats` on, a survivor the
    paired test proves slower than the leader is dropped. Finished with one survivor (DECIDED),
    with all survivors equivalent to the leader (TIED), or at `last_round` / out of budget
    (UNDECIDED, unless one of the first two holds)."""
    rounds = max((len(v) for v in speeds.values()), default=0)
    measured = [n for n in alive if any(v is not None for v in speeds[n])]
    if not measured:
        raise ValueError("no contender has a measurement: nothing to race")
    dropped = dict(dropped)
    leader = max(measured, key=lambda n: (mean_log(speeds[n]), -measured.index(n)))
    survivors = list(measured)
    against: dict[int, Comparison] = {}
    for n in measured:
        if n == leader:
            continue
        c = compare(
            *paired(speeds[n], speeds[leader]), confidence=rules.confidence, margin=rules.margin
        )
        if rounds >= rules.repeats and c.decision == SLOWER:
            survivors.remove(n)
            dropped[n] = rounds
        else:
            against[n] = c
    if len(survivors) == 1:
        outcome = DECIDED
    elif rounds >= rules.repeats and all(c.decision == EQUIVALENT for c in against.values()):
        outcome = TIED
    elif rounds >= rules.last_round or out_of_budget:
        outcome = UNDECIDED
    else:
        outcome = None
    return Standing(
        leader=leader,
        alive=tuple(survivors),
        dropped=dropped,
        against_leader=against,
        rounds=rounds,
        finished=outcome is not None,
        outcome=outcome,
    )


def round_order(contenders: Sequence[int], *, seed: int, round_index: int) -> list[int]:
    """This round's running order: a shuffle that depends only on the seed and the round, so a
    resumed race runs the same order it would have."""
    order = list(contenders)
    random.Random(f"{seed}:{round_index}").shuffle(order)
    return order


def lead(
    winner: Sequence[float | None], start: Sequence[float | None], *, rules: VerifyConf
) -> Comparison | None:
    """The winner's speed over the starting config's on their shared rounds, with its interval;
    None when they share fewer than two rounds."""
    w, s = paired(winner, start)
    if len(w) < 2:
        return None
    return compare(w, s, confidence=rules.confidence, margin=rules.margin)


def inverse(c: Comparison) -> Comparison:
    """The same comparison seen from the other side (leader over contender)."""
    return dataclasses.replace(
        c,
        ratio=1 / c.ratio,
        low=1 / c.high if c.high else math.inf,
        high=1 / c.low if c.low else math.inf,
    )


# An interval wider than this (its upper bound over its lower; a lower bound of ~0 included) says
# nothing a reader can use: two rounds that disagree give a t interval with one degree of freedom
# (12.7 standard errors each side at 95%), e.g. 0.00x-57729952.90x.
USELESS_INTERVAL = 100.0


def interval_text(c: Comparison) -> str:
    """Like '1.12x (95% CI 1.05x-1.19x, 6 rounds)'. An interval that says nothing is named as
    such with the reason instead of its numbers: '1.38x (no interval: 1 round)', '(no interval:
    2 rounds disagree too much)' (MLflow's best/lead_over_start_low/_high keep them)."""
    rounds = f"{c.rounds} round{'s' if c.rounds != 1 else ''}"
    if c.rounds < 2:
        return f"{c.ratio:.2f}x (no interval: {rounds})"
    finite = math.isfinite(c.low) and math.isfinite(c.high)
    if not finite or c.high > USELESS_INTERVAL * c.low:
        return f"{c.ratio:.2f}x (no interval: {rounds} disagree too much)"
    return f"{c.ratio:.2f}x ({100 * c.confidence:.0f}% CI {c.low:.2f}x-{c.high:.2f}x, {rounds})"
