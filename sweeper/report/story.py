"""The sweep's closing story: the starting config against the winner, each with its bottleneck
diagnosis (train/explain/diagnosis.py), and the next fixes with the evidence the study holds.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.report.console import console
from sweeper.verify.race_rules import DECIDED, TIED, UNDECIDED, interval_text
from sweeper.verify.stage import Verification, Winner, find_baseline, trial_result


def tell_story(
    study: optuna.Study,
    verification: Verification,
    *,
    baseline: dict | None,
    planned_steps: int,
    tracker: Any,
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
        gain = f" (the starting config: {START_WON.get(winner.outcome, START_WON[''])})"
    win_search = trial_result(winner.trial) or {}
    lines.append(
        f"winner (trial {winner.number}): {win_median:,.0f} tokens/s (verified median, "
        f"real full steps; search run {search_text(win_search)}){gain}; {d.headline}"
    )
    steps = []
    for fix in d.fixes:
        basis = measured_basis(study, fix.fix, winner=winner.trial.params, winner_tps=win_median,
                               noise_floor=noise_floor)  # fmt: skip
        if basis is None:
            continue  # measured at the winner's other settings and no faster: not a next step
        bound = "gain unknown" if fix.expected_gain is None else f"up to {fix.expected_gain:.2f}x"
        steps.append(f"  next: {fix.fix}: {bound} ({fix.basis}; {basis})")
    lines.extend(steps[:3])
    tags["verdict.winner"] = d.headline
    for line in lines:
        console.print(line)
    tracker.log_best(best_yaml=None, extra_artifacts=[], metrics=metrics, tags=tags)


START_WON = {
    DECIDED: "the race proved every searched contender slower",
    TIED: "the contenders left were equivalent to it, and it is the simplest",
    UNDECIDED: "it leads, but not significantly",
    "": "nothing searched beat it",
}


def measured_basis(
    study: optuna.Study,
    suggestion: str,
    *,
    winner: dict,
    winner_tps: float,
    noise_floor: float,
) -> str | None:
    """What the sweep measured of a suggested fix, said beside its arithmetic bound; None when
    the suggestion is no next step: the winner already has it, or a trial at the winner's other
    settings measured it no faster than the winner (within `noise_floor`)."""
    wanted = dict(re.findall(r"([\w.]+)=(\S+)", suggestion))
    searched = {k for t in study.get_trials(deepcopy=False) for k in t.params}
    wanted = {k: v for k, v in wanted.items() if k in searched}
    if not wanted:
        return "not searched in this sweep"
    if all(_same(winner.get(k), v) for k, v in wanted.items()):
        return None
    at_winner, elsewhere = None, None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        tps = (t.user_attrs.get("metrics") or {}).get("tokens_per_s")
        if not tps or not all(_same(t.params.get(k), v) for k, v in wanted.items()):
            continue
        others = {k: v for k, v in t.params.items() if k not in wanted}
        if others == {k: v for k, v in winner.items() if k not in wanted}:
            at_winner = tps if at_winner is None else max(at_winner, tps)
        else:
            elsewhere = tps if elsewhere is None else max(elsewhere, tps)
    if at_winner is not None:
        if at_winner <= winner_tps * (1 + noise_floor):
            return None
        return (f"measured at the winner's other settings: {at_winner:,.0f} tokens/s in one search "
                f"run, {at_winner / winner_tps:.2f}x the winner's verified median")
    if elsewhere is not None:
        return (f"not measured at the winner's settings; at other settings its best search run "
                f"was {elsewhere:,.0f} tokens/s")
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
        return (f"{tps:,.0f} tokens/s projected from steps of {proj['micro_batches_per_step']} of "
                f"{proj['grad_accum']} micro-batches")
    return f"{tps:,.0f} tokens/s"
