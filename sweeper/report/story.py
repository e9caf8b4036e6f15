"""The sweep's closing story: the starting config against the winner, each with its bottleneck
diagnosis (train/core/diagnosis.py), and the next fixes with the evidence the study holds.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import optuna

from sweeper.report.console import say
from sweeper.report.verdict_text import winner_text
from sweeper.tracking.protocol import Tracker
from sweeper.verify.race_rules import DECIDED, TIED, UNDECIDED, interval_text
from sweeper.verify.stage import Verification, Winner, find_baseline, trial_result
from train.core.diagnosis_text import basis_text, fix_text, headline_text
from train.core.evidence import SearchRun, judge_fix, search_runs, verified_runs


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
    from train.core.diagnosis import diagnose

    winner: Winner = verification.winner
    lines = [f"race: {winner_text(winner)}"]
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
            f"{headline_text(d)}"
        )
        tags["verdict.default"] = headline_text(d)
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
        f"real full steps; search run {search_text(win_search)}){gain}; {headline_text(d)}"
    )
    steps = []
    runs, verified = next_step_evidence(study, verification.results)
    for fix in d.fixes:
        measured = judge_fix(
            fix.changes, runs=runs, verified=verified, winner=winner.number, noise_floor=noise_floor
        )
        if measured is None:
            continue  # the winner has it, or it was measured no faster at its settings
        bound = "gain unknown" if fix.expected_gain is None else f"up to {fix.expected_gain:.2f}x"
        judged = replace(fix, measured=measured)
        steps.append(f"  next: {fix_text(judged)}: {bound} ({basis_text(judged)})")
    lines.extend(steps[:3])
    tags["verdict.winner"] = headline_text(d)
    for line in lines:
        say(line)
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
    measured = [
        n for n, rs in verification.results.items() if any(r and r.get("tokens_per_s") for r in rs)
    ]
    return len(measured) >= 2


def next_step_evidence(
    study: optuna.Study, results: Mapping[int, Sequence[dict]]
) -> tuple[list[SearchRun], dict[int, list[float]]]:
    """The inputs of `judge_fix` from a study and the race's results by trial number."""
    return search_runs(study.get_trials(deepcopy=False)), verified_runs(results)


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
