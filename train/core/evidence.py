"""What a sweep measured of a suggested fix: the one rule the sweep's `next:` lines
(sweeper/report/story.py) and `python -m train.explain --result <sweep dir>` both apply, so the two
never disagree about a suggestion.

A suggestion is a diagnosis fix's `changes` (train/core/bottleneck_fixes.py): the dotted trainer
keys it sets, such as {"batch.micro_batch": 16, "batch.grad_accum": 4}; its evidence is the study's
search trials (`SearchRun`) and each raced trial's verified tokens/s (real full steps). `judge_fix`
returns None where the sweep measured the value no faster at the winner's other settings (the race,
a pruned trial, a complete search run), and otherwise what was measured, as a `Measured`;
`evidence_text` in train/core/diagnosis_text.py writes the one sentence both callers show. Pure
and torch-free: plain values in; the callers read the study.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

# hydra.sweeper.verify.noise_floor's default (sweeper/settings.py): a search run within 1% of the
# winner's is no faster
DEFAULT_NOISE_FLOOR = 0.01

# the study attribute holding the race's rounds (sweeper/verify/race_rounds.py writes it), whose
# results `verified_runs` reads:
# {"contenders": [...], "rounds": [{"<trial>": {"value", "job_dir"} or None}]}
RACE_ATTR = "race"

# What the sweep measured of a fix that is still a next step:
# not_searched: none of its keys was a search knob; at_winner: a complete search run at the
# winner's other settings, faster than the winner's (not verified); raced_elsewhere: a raced
# config at other settings, its verified median; searched_elsewhere: the best complete search
# run at other settings; pruned_elsewhere: only pruned trials at other settings; not_measured:
# its value was never tried.
MeasuredKind = Literal[
    "not_searched",
    "at_winner",
    "raced_elsewhere",
    "searched_elsewhere",
    "pruned_elsewhere",
    "not_measured",
]


@dataclass(frozen=True, kw_only=True)
class SearchRun:
    """One search trial as the next steps weigh it."""

    number: int
    params: Mapping[str, Any]
    state: str  # "complete", "pruned", "fail", ... (Optuna's state, lower case)
    # The search run's figure. A pruned trial's is a running figure from a window cut short:
    # never quoted and never compared.
    tokens_per_s: float | None


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What the sweep measured of a suggested fix that is still a next step."""

    kind: MeasuredKind
    trial: int | None = None  # the trial whose figure is quoted
    tokens_per_s: float | None = None  # its search run's, or its verified median (raced_elsewhere)
    ratio: float | None = None  # at_winner: over the winner's search run; None: the winner has none


def judge_fix(
    changes: Mapping[str, Any],
    *,
    runs: Sequence[SearchRun],
    verified: Mapping[int, Sequence[float]],
    winner: int,
    noise_floor: float,
) -> Measured | None:
    """What the sweep measured of a fix that sets `changes`; None when it is no next step. Pure:
    `runs` are the search trials, `verified` each raced trial's verified tokens/s (real full
    steps), `winner` the race winner's trial number. Keys no trial searched are ignored.

    Verified evidence first, like with like always, a pruned trial's running figure never:
    - the winner already has the value: None;
    - the race measured the value at the winner's other settings: None (that config lost the race:
      dropped as slower, equivalent, or behind the leader);
    - the search pruned it at the winner's other settings: None (below the median of finished
      trials when it was stopped);
    - a complete search run at the winner's other settings no faster than the winner's own search
      run (within `noise_floor`): None; a faster one is shown with that ratio, as not verified;
    - raced only at other settings, every such config verified no faster than the winner's
      verified median: None (the race measured the value slower, at whatever settings);
    - measured only at other settings: the best verified median there, else the best complete
      search run, else "only in pruned trials"; or "not measured" / "not searched" at all.
    """
    by_number = {r.number: r for r in runs}
    win = by_number[winner]
    searched = {k for r in runs for k in r.params}
    wanted = {k: v for k, v in changes.items() if k in searched}
    if not wanted:
        return Measured(kind="not_searched")
    if _has(win.params, wanted):
        return None
    win_others = {k: v for k, v in win.params.items() if k not in wanted}
    at_winner, elsewhere = [], []
    for r in runs:
        if r.number == winner or not _has(r.params, wanted):
            continue
        same_rest = {k: v for k, v in r.params.items() if k not in wanted} == win_others
        (at_winner if same_rest else elsewhere).append(r)
    if any(r.number in verified or r.state == "pruned" for r in at_winner):
        return None
    done = [r for r in at_winner if r.state == "complete" and r.tokens_per_s]
    if done:
        slowest = min(done, key=lambda r: r.tokens_per_s)
        if not win.tokens_per_s:
            return Measured(
                kind="at_winner", trial=slowest.number, tokens_per_s=slowest.tokens_per_s
            )
        ratio = slowest.tokens_per_s / win.tokens_per_s
        if ratio <= 1 + noise_floor:
            return None
        return Measured(
            kind="at_winner", trial=slowest.number, tokens_per_s=slowest.tokens_per_s, ratio=ratio
        )
    return _elsewhere(elsewhere, verified=verified.get(winner), raced=verified)


def _elsewhere(
    runs: Sequence[SearchRun],
    *,
    verified: Sequence[float] | None,
    raced: Mapping[int, Sequence[float]],
) -> Measured | None:
    """What the sweep measured of a value only at other settings than the winner's, whose own
    verified tokens/s are `verified`; None when the race measured it no faster there."""
    medians = [(statistics.median(raced[r.number]), r.number) for r in runs if r.number in raced]
    if medians:
        median, number = max(medians)
        if verified and median <= statistics.median(verified):
            return None
        return Measured(kind="raced_elsewhere", trial=number, tokens_per_s=median)
    done = [r for r in runs if r.state == "complete" and r.tokens_per_s]
    if done:
        best = max(done, key=lambda r: r.tokens_per_s)
        return Measured(
            kind="searched_elsewhere", trial=best.number, tokens_per_s=best.tokens_per_s
        )
    if any(r.state == "pruned" for r in runs):
        return Measured(kind="pruned_elsewhere")
    return Measured(kind="not_measured")


def _has(params: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a trial's params hold every wanted value (compared as text: Optuna stores a
    categorical's choice as written, a fix sets a typed value)."""
    return all(str(params.get(k)).lower() == str(v).lower() for k, v in wanted.items())


def search_runs(trials: Iterable[Any]) -> list[SearchRun]:
    """The study's trials (Optuna FrozenTrials, read duck-typed) as the next steps weigh them."""
    return [
        SearchRun(
            number=t.number,
            params=dict(t.params),
            state=t.state.name.lower(),
            tokens_per_s=(t.user_attrs.get("metrics") or {}).get("tokens_per_s"),
        )
        for t in trials
    ]


def verified_runs(results: Mapping[int, Sequence[dict | None]]) -> dict[int, list[float]]:
    """Each raced trial's verified tokens/s from its race results (None: a round it did not
    complete); a trial with none is left out."""
    verified = {
        n: [r["tokens_per_s"] for r in rs if r and r.get("tokens_per_s")]
        for n, rs in results.items()
    }
    return {n: v for n, v in verified.items() if v}
