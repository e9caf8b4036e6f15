"""What a sweep measured of a suggested fix: the one rule the sweep's `next:` lines
(sweeper/report/story.py) and `python -m train.explain --result <sweep dir>` both apply, so the two
never disagree about a suggestion.

A suggestion is a diagnosis fix (train/core/diagnosis.py) such as `batch.micro_batch=16
batch.grad_accum=4`; its evidence is the study's search trials (`SearchRun`) and each raced trial's
verified tokens/s (real full steps). `measured_basis` returns None where the sweep measured the
value no faster at the winner's other settings (the race, a pruned trial, a complete search run),
and otherwise the sentence that says what was measured. Pure and torch-free: plain values in, text
out; the callers read the study.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# hydra.sweeper.noise_floor's default (sweeper/settings.py): a search run within 1% of the winner's
# is no faster
DEFAULT_NOISE_FLOOR = 0.01


@dataclass(frozen=True, kw_only=True)
class SearchRun:
    """One search trial as the next steps weigh it."""

    number: int
    params: Mapping[str, Any]
    state: str  # "complete", "pruned", "fail", ... (Optuna's state, lower case)
    # The search run's figure. A pruned trial's is a running figure from a window cut short:
    # never quoted and never compared.
    tokens_per_s: float | None


def measured_basis(
    suggestion: str,
    *,
    runs: Sequence[SearchRun],
    verified: Mapping[int, Sequence[float]],
    winner: int,
    noise_floor: float,
) -> str | None:
    """What the sweep measured of a suggested fix, said beside its arithmetic bound; None when the
    suggestion is no next step. Pure: `runs` are the search trials, `verified` each raced trial's
    verified tokens/s (real full steps), `winner` the race winner's trial number.

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
    wanted = dict(re.findall(r"([\w.]+)=(\S+)", suggestion))
    searched = {k for r in runs for k in r.params}
    wanted = {k: v for k, v in wanted.items() if k in searched}
    if not wanted:
        return "not searched in this sweep"
    if all(_same(win.params.get(k), v) for k, v in wanted.items()):
        return None
    win_others = {k: v for k, v in win.params.items() if k not in wanted}
    at_winner, elsewhere = [], []
    for r in runs:
        if r.number == winner or not all(_same(r.params.get(k), v) for k, v in wanted.items()):
            continue
        same_rest = {k: v for k, v in r.params.items() if k not in wanted} == win_others
        (at_winner if same_rest else elsewhere).append(r)
    if any(r.number in verified for r in at_winner):
        return None
    if any(r.state == "pruned" for r in at_winner):
        return None
    done = [r for r in at_winner if r.state == "complete" and r.tokens_per_s]
    if done:
        slowest = min(done, key=lambda r: r.tokens_per_s)
        if not win.tokens_per_s:
            return (
                f"measured at the winner's other settings: {slowest.tokens_per_s:,.0f} tokens/s "
                f"in the search run of trial {slowest.number}; not verified"
            )
        ratio = slowest.tokens_per_s / win.tokens_per_s
        if ratio <= 1 + noise_floor:
            return None
        return (
            f"measured at the winner's other settings: {slowest.tokens_per_s:,.0f} tokens/s in "
            f"the search run of trial {slowest.number}, {ratio:.2f}x the winner's search run; "
            f"not verified"
        )
    raced = [(statistics.median(verified[r.number]), r.number) for r in elsewhere
             if r.number in verified]  # fmt: skip
    if raced:
        median, number = max(raced)
        win_verified = verified.get(winner)
        if win_verified and median <= statistics.median(win_verified):
            return None
        return (
            f"not measured at the winner's settings; at other settings trial {number} "
            f"verified {median:,.0f} tokens/s (median, real full steps)"
        )
    done = [r for r in elsewhere if r.state == "complete" and r.tokens_per_s]
    if done:
        best = max(done, key=lambda r: r.tokens_per_s)
        return (
            f"not measured at the winner's settings; at other settings its best complete "
            f"search run was {best.tokens_per_s:,.0f} tokens/s (trial {best.number})"
        )
    if any(r.state == "pruned" for r in elsewhere):
        return (
            "not measured at the winner's settings; at other settings only in pruned "
            "trials (stopped early: no full figure)"
        )
    return "not measured in this sweep"


def _same(a: Any, b: str) -> bool:
    return str(a).lower() == b.lower()


def search_runs(trials: Iterable[Any]) -> list[SearchRun]:
    """The study's trials (Optuna FrozenTrials, read duck-typed) as the next steps weigh them."""
    return [
        SearchRun(number=t.number, params=dict(t.params), state=t.state.name.lower(),
                  tokens_per_s=(t.user_attrs.get("metrics") or {}).get("tokens_per_s"))
        for t in trials
    ]  # fmt: skip


def verified_runs(results: Mapping[int, Sequence[dict | None]]) -> dict[int, list[float]]:
    """Each raced trial's verified tokens/s from its race results (None: a round it did not
    complete); a trial with none is left out."""
    verified = {n: [r["tokens_per_s"] for r in rs if r and r.get("tokens_per_s")]
                for n, rs in results.items()}  # fmt: skip
    return {n: v for n, v in verified.items() if v}
