"""The sweep's closing story: the starting config against the winner, each with its bottleneck
diagnosis (train/explain/diagnosis.py), and the next fixes with the evidence the study holds.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from sweeper.report.console import console
from sweeper.tracking import Tracker
from sweeper.verify.race_rules import DECIDED, TIED, UNDECIDED, interval_text
from sweeper.verify.stage import Verification, Winner, find_baseline, trial_result


def tell_story(
    study: optuna.Study,
    verification: Verification,
    *,
    baseline: dict | None,
    planned_steps: int,
    tracker: Tracker,
    noise_floor: float = 0.01,
) -> None:
    """Print the bottleneck verdict for the winner and for the starting config, side by side,
    and log both (and the speedup) on the parent MLflow run."""
    from train.explain.diagnosis import diagnose

    winner: Winner = verification.winner
    lines = [f"race: {winner.verdict.reason}"]
    tags: dict[str, Any] = {}
    metrics: dict[str, float] = {}
    base_trial = find_baseline(study, baseline)
    base_result = trial_result(base_trial) if base_trial is not None else None
    win_median = statistics.median(r["tokens_per_s"] for r in winner.results)
    gain = ""
    start_won = base_trial is not None and base_trial.number == winner.number
    if base_result is not None and base_result.get("tokens_per_s"):
        # Like with like: the starting config's verified median (real full steps, the same
        # rounds as the winner's) when it was re-measured, and a speedup of 1 by definition
        # when it is the winner.
        base_runs = verification.results.get(base_trial.number) or []
        real = [r for r in base_runs if r and r.get("tokens_per_s")]
        base_tps = [r["tokens_per_s"] for r in real]
        base_value = statistics.median(base_tps) if base_tps else base_result["tokens_per_s"]
        d = diagnose(real[-1] if real else base_result, planned_steps=planned_steps)
        lines.append(
            f"starting config (trial {base_trial.number}): "
            f"{measured_text(base_value, base_tps)} (search run {search_text(base_result)}); "
            f"{d.headline}"
        )
        tags["verdict.default"] = d.headline
        speedup = 1.0 if start_won else win_median / base_value
        metrics["best/speedup_vs_default"] = speedup
        if winner.lead_over_start is not None:  # paired rounds: the ratio with its interval
            gain = f" ({interval_text(winner.lead_over_start)} the start, paired)"
        else:
            basis = "its verified median" if base_tps else "its search run"
            gain = f" ({speedup:.2f}x the start, against {basis})"
    d = diagnose(winner.results[-1], planned_steps=planned_steps)
    if start_won:
        outcome = winner.outcome if raced(verification) else NOT_RACED
        gain = f" (the starting config: {START_WON.get(outcome, START_WON[''])})"
    win_search = trial_result(winner.trial) or {}
    lines.append(
        f"winner (trial {winner.number}): {win_median:,.0f} tokens/s (verified median, "
        f"real full steps; search run {search_text(win_search)}){gain}; {d.headline}"
    )
    steps = []
    runs, verified = next_step_evidence(study, verification.results)
    for fix in d.fixes:
        basis = measured_basis(fix.fix, runs=runs, verified=verified, winner=winner.number,
                               noise_floor=noise_floor)  # fmt: skip
        if basis is None:
            continue  # the winner has it, or it was measured no faster at its settings
        bound = "gain unknown" if fix.expected_gain is None else f"up to {fix.expected_gain:.2f}x"
        steps.append(f"  next: {fix.fix}: {bound} ({fix.basis}; {basis})")
    lines.extend(steps[:3])
    tags["verdict.winner"] = d.headline
    for line in lines:
        console.print(line)
    tracker.log_best(best_yaml=None, extra_artifacts=[], metrics=metrics, tags=tags)


NOT_RACED = "not raced"
START_WON = {
    NOT_RACED: "no searched contender was raced against it",
    DECIDED: "the race proved every searched contender slower",
    TIED: "the contenders left were equivalent to it, and it is the simplest",
    UNDECIDED: "it leads, but not significantly",
    "": "nothing searched beat it",
}


def raced(verification: Verification) -> bool:
    """Whether a race ran: two or more contenders measured in it (a race of one proves nothing)."""
    measured = [n for n, rs in verification.results.items()
                if any(r and r.get("tokens_per_s") for r in rs)]  # fmt: skip
    return len(measured) >= 2


@dataclass(frozen=True, kw_only=True)
class SearchRun:
    """One search trial as the next steps weigh it."""

    number: int
    params: Mapping[str, Any]
    state: str  # "complete", "pruned", "fail", ... (Optuna's state, lower case)
    # The search run's figure. A pruned trial's is a running figure from a window cut short:
    # never quoted and never compared.
    tokens_per_s: float | None


def next_step_evidence(
    study: optuna.Study, results: Mapping[int, Sequence[dict]]
) -> tuple[list[SearchRun], dict[int, list[float]]]:
    """The inputs of `measured_basis` from a study and the race's results by trial number."""
    runs = [
        SearchRun(number=t.number, params=dict(t.params), state=t.state.name.lower(),
                  tokens_per_s=(t.user_attrs.get("metrics") or {}).get("tokens_per_s"))
        for t in study.get_trials(deepcopy=False)
    ]  # fmt: skip
    verified = {n: [r["tokens_per_s"] for r in rs if r and r.get("tokens_per_s")]
                for n, rs in results.items()}  # fmt: skip
    return runs, {n: v for n, v in verified.items() if v}


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


def measured_text(value: float, verified: list[float]) -> str:
    """A config's tokens/s, saying whether it is a verified median or its search run only."""
    if verified:
        return f"{value:,.0f} tokens/s (verified median of {len(verified)}, real full steps)"
    return f"{value:,.0f} tokens/s (its search run only: no verification run completed)"


def search_text(result: dict) -> str:
    """A search run's tokens/s, saying whether it was projected from short steps."""
    tps = result.get("tokens_per_s")
    if tps is None:
        return "n/a"
    proj = result.get("projection")
    if proj:
        return (
            f"{tps:,.0f} tokens/s projected from steps of {proj['micro_batches_per_step']} of "
            f"{proj['grad_accum']} micro-batches"
        )
    return f"{tps:,.0f} tokens/s"
