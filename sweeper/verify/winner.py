"""Noise-aware winner selection over re-measured finalists.

The sweep's best trial is one noisy sample; the finalists are re-run R times in fresh processes and
ranked here by median. A lead smaller than the run-to-run noise is not a lead: among candidates tied
with the best, the simplest config wins, because it is the one that costs least to keep. A verdict
is data (its kind and the numbers that decided it); sweeper/report/verdict_text.py says it.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from sweeper.space.point import Point
from sweeper.verify.race_rules import DECIDED, TIED, Standing, inverse
from sweeper.verify.race_stats import Comparison
from train.core.keys import COMPILE, WORKERS

log = logging.getLogger(__name__)

# Relative compile cost (time to compile, memory for CUDA graphs); a tie-break among equally simple
# configs, so only the order matters. Absent override = the trainer default, runtime.compile=none.
_COMPILE_COST = {
    "none": 0,
    "default": 1,
    "reduce-overhead": 2,
    "max-autotune-no-cudagraphs": 3,
    "max-autotune": 4,
}


@dataclass(kw_only=True)
class Candidate:
    """One finalist and its re-measured objective values."""

    key: str  # stable id, e.g. the sorted overrides joined
    params: dict[str, Any]  # the sampled parameters (Optuna names): the study's and the table's
    overrides: list[str]  # trainer overrides, e.g. ["runtime.compile=default"]
    values: list[float]  # the R re-measured objective values
    simplicity: int  # lower = simpler (e.g. knobs changed from the defaults); given by the caller
    # the knobs it sets (SearchSpace.point of `params`), with the forecast of one race run
    point: Point = field(default_factory=Point)


# How a verdict was reached. pick_winner's: one candidate measured; a decisive lead of the best
# median; a tie within the noise won by the best median (also the simplest), by a simpler config, or
# by an equally simple one with a lighter compile mode or fewer data workers. race_verdict's: one
# contender measured; one survivor; equivalent survivors; rounds spent with a test still open.
VerdictKind = Literal[
    "only_one",
    "decisive",
    "tied_best",
    "tied_simpler",
    "tied_lighter",
    "race_alone",
    "race_won",
    "race_equivalent",
    "race_open",
]


@dataclass(frozen=True, kw_only=True)
class Summary:
    """One candidate's re-measured values, summarized."""

    candidate: Candidate
    median: float
    cv: float
    lo: float
    hi: float
    n: int


@dataclass(frozen=True, kw_only=True)
class Medians:
    """The numbers a ranking by median decided by."""

    best: Summary  # the best median
    runner_up: Summary | None  # the second median, where the best's lead is decisive
    tied: tuple[Summary, ...]  # the best and every candidate within its noise, best first
    chosen: Summary  # the winner
    apart: float  # relative gap of the best to the runner-up (decisive) or to the last tied
    noise: float  # relative noise band of the best and the runner-up (decisive)
    overlap: bool  # the best's and the runner-up's ranges overlap
    maximize: bool
    floor_only: float | None  # every candidate has one value: the noise is this floor alone


@dataclass(frozen=True, kw_only=True)
class RaceEnd:
    """The numbers a race's verdict names (sweeper/verify/race_rules.py)."""

    rounds: int
    chosen: int  # the winner's trial number
    survivors: int
    dropped: tuple[tuple[int, int], ...]  # (trial, the round it was dropped after), by trial
    failed: tuple[int, ...]  # trials that failed every run
    open_pairs: tuple[tuple[int, Comparison], ...]  # (trial, the leader over it), still open


@dataclass(kw_only=True)
class Verdict:
    """The chosen config, how it was chosen and the numbers that decided it."""

    winner: Candidate  # the config to export
    ranking: list[dict[str, Any]]  # best first: key, median, cv, min, max, n, within_noise_of_best
    decisive: bool  # the best median beats every other candidate by more than the noise
    kind: VerdictKind
    medians: Medians | None = None  # pick_winner's numbers
    race: RaceEnd | None = None  # race_verdict's numbers


def coefficient_of_variation(values: list[float]) -> float:
    """Sample standard deviation over |mean|; 0 with fewer than two values or a zero mean."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    if mean == 0:
        return 0.0
    return statistics.stdev(values) / abs(mean)


def pick_winner(
    candidates: list[Candidate],
    *,
    direction: Literal["maximize", "minimize"],
    noise_floor: float = 0.01,
) -> Verdict:
    """Rank candidates by median and pick the winner, preferring simplicity within the noise.

    The best median's lead over another candidate counts only if it exceeds the noise,
    max(2 * max(cv_best, cv_other) * |median_best|, noise_floor * |median_best|). A candidate with
    a single value has no CV; then only the floor (and any known CV of the pair) applies. Every
    candidate within the noise of the best is tied with it; among the tied set the lowest
    `simplicity` wins, then the lighter compile mode and fewer data workers, then the better median
    (equal medians: the key, so the choice is stable).
    """
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    if not 0 <= noise_floor < 1:
        raise ValueError(f"noise_floor must be in [0, 1) (a relative spread), got {noise_floor}")
    measured = [c for c in candidates if len(c.values) >= 1]
    if not measured:
        raise ValueError(
            f"no candidate has a measured value ({len(candidates)} given); the verification "
            f"runs all failed, so there is nothing to export"
        )
    skipped = len(candidates) - len(measured)
    if skipped:
        log.warning("%d candidate(s) had no measured value and were ignored", skipped)

    stats = [_summarize(c) for c in measured]
    sign = -1.0 if direction == "maximize" else 1.0
    stats.sort(key=lambda s: (sign * s.median, s.candidate.simplicity, s.candidate.key))
    best = stats[0]
    # positions, not keys, identify candidates: two finalists may share a key
    tied_at = [0] + [
        i for i, s in enumerate(stats) if i and _gap(best, s) <= _noise(best, s, noise_floor)
    ]
    tied = [stats[i] for i in tied_at]
    winner = stats[min(tied_at, key=lambda i: (_preference(stats[i]), i))]
    ranking = [
        {
            "key": s.candidate.key,
            "median": s.median,
            "cv": s.cv,
            "min": s.lo,
            "max": s.hi,
            "n": s.n,
            "within_noise_of_best": i in tied_at,
        }
        for i, s in enumerate(stats)
    ]
    kind, medians = _medians(stats, tied, winner, direction=direction, noise_floor=noise_floor)
    return Verdict(
        winner=winner.candidate,
        ranking=ranking,
        decisive=len(tied) == 1,
        kind=kind,
        medians=medians,
    )


def _summarize(c: Candidate) -> Summary:
    values = [float(v) for v in c.values]
    return Summary(
        candidate=c,
        median=statistics.median(values),
        cv=coefficient_of_variation(values),
        lo=min(values),
        hi=max(values),
        n=len(values),
    )


def _gap(best: Summary, other: Summary) -> float:
    return abs(best.median - other.median)


def _noise(best: Summary, other: Summary, noise_floor: float) -> float:
    """Absolute noise band around the best median for this pair (CVs only where n >= 2)."""
    known_cv = max((s.cv for s in (best, other) if s.n >= 2), default=0.0)
    scale = abs(best.median)
    return max(2 * known_cv * scale, noise_floor * scale)


def _resource_cost(c: Candidate) -> tuple[int, int]:
    """(compile cost, data workers) from the overrides; absent knobs keep the trainer default."""
    settings = {}
    for item in c.overrides:
        name, _, value = item.partition("=")
        settings[name.strip().lstrip("+~")] = value.strip()
    # an unknown mode ranks as the heaviest: it is certainly not lighter than the known ones
    compile_cost = _COMPILE_COST.get(settings.get(COMPILE, "none"), max(_COMPILE_COST.values()))
    try:
        workers = int(settings.get(WORKERS, "0"))
    except ValueError:
        workers = 0
    return compile_cost, workers


def _preference(s: Summary) -> tuple[int, tuple[int, int]]:
    """Among tied candidates: fewer changes first, then lighter compile and fewer data workers."""
    return s.candidate.simplicity, _resource_cost(s.candidate)


def _rel(gap: float, ref: float) -> float:
    return gap / abs(ref) if ref else math.inf if gap else 0.0


def _medians(
    stats: list[Summary],
    tied: list[Summary],
    winner: Summary,
    *,
    direction: str,
    noise_floor: float,
) -> tuple[VerdictKind, Medians]:
    """How the ranking decided, and its numbers."""
    best = stats[0]
    runner = stats[1] if len(stats) > 1 and len(tied) == 1 else None
    if len(stats) == 1:
        kind: VerdictKind = "only_one"
    elif runner is not None:
        kind = "decisive"
    elif winner is best:
        kind = "tied_best"
    elif winner.candidate.simplicity < best.candidate.simplicity:
        kind = "tied_simpler"
    else:
        kind = "tied_lighter"
    other = runner if runner is not None else tied[-1]
    medians = Medians(
        best=best,
        runner_up=runner,
        tied=tuple(tied),
        chosen=winner,
        apart=_rel(_gap(best, other), best.median),
        noise=_rel(_noise(best, other, noise_floor), best.median),
        overlap=best.lo <= other.hi and other.lo <= best.hi,
        maximize=direction == "maximize",
        floor_only=noise_floor if all(s.n < 2 for s in stats) else None,
    )
    return kind, medians


def race_verdict(
    cands: dict[int, Candidate],
    standing: Standing,
    *,
    direction: Literal["maximize", "minimize"],
    noise_floor: float,
) -> Verdict:
    """The race's winner and how the race ended (sweeper/verify/race_rules.py).

    Decided: the one survivor. Equivalent: the simplest survivor (as `pick_winner` prefers among
    tied configs). Not significant: the leader (the best estimate), with its open comparisons.
    `ranking` is `pick_winner`'s, by median."""
    measured = [c for c in cands.values() if c.values]
    ranked = pick_winner(measured, direction=direction, noise_floor=noise_floor)
    failed = tuple(n for n, c in cands.items() if not c.values)
    if standing.outcome == DECIDED:
        chosen = standing.alive[0]
        kind: VerdictKind = "race_won" if standing.dropped else "race_alone"
    elif standing.outcome == TIED:
        chosen = min(
            standing.alive, key=lambda n: (_preference(_summarize(cands[n])), cands[n].key)
        )
        kind = "race_equivalent"
    else:  # the best estimate, said to be no proven win (a tie would have gone to the simplest)
        chosen = standing.leader
        kind = "race_open"
    race = RaceEnd(
        rounds=standing.rounds,
        chosen=chosen,
        survivors=len(standing.alive),
        dropped=tuple(sorted(standing.dropped.items())),
        failed=failed,
        open_pairs=tuple((n, inverse(c)) for n, c in standing.against_leader.items()),
    )
    return Verdict(
        winner=cands[chosen],
        ranking=ranked.ranking,
        decisive=standing.outcome == DECIDED,
        kind=kind,
        race=race,
    )
