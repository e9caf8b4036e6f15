"""Noise-aware winner selection over re-measured finalists.

The sweep's best trial is one noisy sample; the finalists are re-run R times in fresh processes and
ranked here by median. A lead smaller than the run-to-run noise is not a lead: among candidates tied
with the best, the simplest config wins, because it is the one that costs least to keep.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from sweeper.numbers import fmt_pct
from sweeper.space.point import Point
from sweeper.verify.race_rules import DECIDED, TIED, Standing, interval_text, inverse
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


@dataclass
class Verdict:
    """The chosen config and why."""

    winner: Candidate  # the config to export
    ranking: list[dict[str, Any]]  # best first: key, median, cv, min, max, n, within_noise_of_best
    decisive: bool  # the best median beats every other candidate by more than the noise
    reason: str  # one or two sentences for the user, with numbers


def coefficient_of_variation(values: list[float]) -> float:
    """Sample standard deviation over |mean|; 0 with fewer than two values or a zero mean."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    if mean == 0:
        return 0.0
    return statistics.stdev(values) / abs(mean)


@dataclass(frozen=True)
class _Stats:
    candidate: Candidate
    median: float
    cv: float
    lo: float
    hi: float
    n: int


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
    decisive = len(tied) == 1
    reason = _reason(stats, tied, winner, direction=direction, noise_floor=noise_floor)
    return Verdict(winner=winner.candidate, ranking=ranking, decisive=decisive, reason=reason)


def _summarize(c: Candidate) -> _Stats:
    values = [float(v) for v in c.values]
    return _Stats(
        candidate=c,
        median=statistics.median(values),
        cv=coefficient_of_variation(values),
        lo=min(values),
        hi=max(values),
        n=len(values),
    )


def _gap(best: _Stats, other: _Stats) -> float:
    return abs(best.median - other.median)


def _noise(best: _Stats, other: _Stats, noise_floor: float) -> float:
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


def _preference(s: _Stats) -> tuple[int, tuple[int, int]]:
    """Among tied candidates: fewer changes first, then lighter compile and fewer data workers."""
    return s.candidate.simplicity, _resource_cost(s.candidate)


def _rel(gap: float, ref: float) -> float:
    return gap / abs(ref) if ref else math.inf if gap else 0.0


def _range(s: _Stats) -> str:
    return f"[{s.lo:.4g}, {s.hi:.4g}]"


def _reason(
    stats: list[_Stats],
    tied: list[_Stats],
    winner: _Stats,
    *,
    direction: str,
    noise_floor: float,
) -> str:
    best = stats[0]
    single = all(s.n < 2 for s in stats)
    cv_note = (
        f" Only one measurement per candidate, so the CV is unknown; the noise is the "
        f"{fmt_pct(noise_floor)} floor alone."
        if single
        else ""
    )
    if len(stats) == 1:
        return (
            f"Only one candidate was measured ('{best.candidate.key}', median {best.median:.4g}, "
            f"n={best.n}); exporting it without a comparison.{cv_note}"
        )
    if len(tied) == 1:
        runner = stats[1]
        gap = _rel(_gap(best, runner), best.median)
        noise = _rel(_noise(best, runner, noise_floor), best.median)
        overlap = "overlap" if best.lo <= runner.hi and runner.lo <= best.hi else "do not overlap"
        better = "higher" if direction == "maximize" else "lower"
        return (
            f"'{best.candidate.key}' wins decisively: median {best.median:.4g} vs "
            f"{runner.median:.4g} for the runner-up '{runner.candidate.key}' "
            f"({fmt_pct(gap)} {better}, beyond the noise of {fmt_pct(noise)}; "
            f"CV {_cvs(best, runner)}); their ranges {_range(best)} and "
            f"{_range(runner)} {overlap}.{cv_note}"
        )
    last = tied[-1]
    apart = _rel(_gap(best, last), best.median)
    cvs = _cvs(*tied)
    head = (
        f"The top {len(tied)} are within noise ({fmt_pct(apart)} apart, CV {cvs}; medians "
        f"{', '.join(f'{s.median:.4g}' for s in tied)})"
    )
    if winner is best:
        tail = (
            f"; '{best.candidate.key}' has the best median and is also the simplest, exporting it."
        )
    elif winner.candidate.simplicity < best.candidate.simplicity:
        tail = (
            f"; exporting the simpler config '{winner.candidate.key}' (simplicity "
            f"{winner.candidate.simplicity} vs {best.candidate.simplicity} for the best median "
            f"'{best.candidate.key}', lower = fewer changes)."
        )
    else:
        tail = (
            f"; equally simple, so exporting '{winner.candidate.key}', which uses a lighter "
            f"compile mode or fewer data workers than the best median '{best.candidate.key}'."
        )
    return head + tail + cv_note


def _cvs(*stats: _Stats) -> str:
    """Like 1.8%/2.4%; n/a for a single value; unknown when no candidate has two values."""
    if all(s.n < 2 for s in stats):
        return "unknown"
    return "/".join(fmt_pct(s.cv) if s.n >= 2 else "n/a" for s in stats)


def race_verdict(
    cands: dict[int, Candidate],
    standing: Standing,
    *,
    direction: Literal["maximize", "minimize"],
    noise_floor: float,
) -> Verdict:
    """The race's winner and a reason that says how the race ended (sweeper/verify/race_rules.py).

    Decided: the one survivor. Equivalent: the simplest survivor (as `pick_winner` prefers among
    tied configs). Not significant: the leader (the best estimate), and the reason gives its
    interval and says what would separate them. `ranking` is `pick_winner`'s, by median."""
    measured = [c for c in cands.values() if c.values]
    ranked = pick_winner(measured, direction=direction, noise_floor=noise_floor)
    survivors = [cands[n] for n in standing.alive]
    name = {id(c): f"trial {n}" for n, c in cands.items()}
    dropped = ", ".join(f"trial {n} after round {r}" for n, r in sorted(standing.dropped.items()))
    rounds = f"{standing.rounds} round{'s' if standing.rounds != 1 else ''}"
    failed = [f"trial {n}" for n, c in cands.items() if not c.values]
    if standing.outcome == DECIDED and not standing.dropped:
        winner = survivors[0]
        others = f" ({', '.join(failed)} failed every run)" if failed else ""
        why = f"only {name[id(winner)]} was measured, in {rounds}{others}: nothing to race"
    elif standing.outcome == DECIDED:
        winner = survivors[0]
        why = (
            f"{name[id(winner)]} wins the race after {rounds}: every other contender was "
            f"proved slower ({dropped})"
        )
        if failed:
            why += f" or failed every run ({', '.join(failed)})"
    elif standing.outcome == TIED:
        winner = min(survivors, key=lambda c: (_preference(_summarize(c)), c.key))
        why = (
            f"after {rounds} the {len(survivors)} survivors are equivalent (each within the "
            f"margin of the leader); exporting the simplest, {name[id(winner)]}"
        )
    else:
        # the best estimate, said to be no proven win (a tie would have gone to the simplest)
        winner = cands[standing.leader]
        open_pairs = "; ".join(
            f"trial {standing.leader} over trial {n} {interval_text(inverse(c))}"
            for n, c in standing.against_leader.items()
        )
        why = (
            f"not significant after {rounds}: {open_pairs or 'one run each'}; exporting the "
            f"leader, {name[id(winner)]}, the best estimate but not a proven win. More rounds "
            f"(hydra.sweeper.verify.max_rounds), a quieter machine or a larger model (longer "
            f"steps, less relative noise) would separate them"
        )
    if dropped and standing.outcome != DECIDED:
        why += f" (dropped as slower: {dropped})"
    return Verdict(
        winner=winner,
        ranking=ranked.ranking,
        decisive=standing.outcome == DECIDED,
        reason=why + ".",
    )
