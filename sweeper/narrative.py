"""The sweep's closing story: the starting config against the winner, each with its bottleneck
diagnosis (train/explain/diagnosis.py), and the next fixes with the evidence the study holds.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper import report
from sweeper.verification import Verification, Winner, find_baseline, trial_result


def explain(
    study: optuna.Study,
    verification: Verification,
    *,
    baseline: dict | None,
    planned_steps: int,
    tracker: Any,
) -> None:
    """Print the bottleneck verdict for the winner and for the starting config, side by side,
    and log both (and the speedup) on the parent MLflow run."""
    from train.explain.diagnosis import diagnose

    winner: Winner = verification.winner
    lines = []
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
        basis = "its verified median" if base_tps else "its search run"
        gain = f" ({speedup:.2f}x the start, against {basis})"
    d = diagnose(winner.results[-1], planned_steps=planned_steps)
    if start_won:
        gain = " (the starting config: nothing searched beat it beyond the noise)"
    win_search = trial_result(winner.trial) or {}
    lines.append(
        f"winner (trial {winner.number}): {win_median:,.0f} tokens/s (verified median, "
        f"real full steps; search run {search_text(win_search)}){gain}; {d.headline}"
    )
    for fix in d.fixes[:3]:
        bound = "gain unknown" if fix.expected_gain is None else f"up to {fix.expected_gain:.2f}x"
        tried = tried_in_study(study, fix.fix)
        seen = (
            f"; tried in this sweep: best {tried:,.0f} tokens/s, {tried / win_median:.2f}x "
            "the winner"
            if tried
            else ""
        )
        lines.append(f"  next: {fix.fix}: {bound} ({fix.basis}{seen})")
    tags["verdict.winner"] = d.headline
    for line in lines:
        report.console.print(line)
    tracker.log_best(best_yaml=None, extra_artifacts=[], metrics=metrics, tags=tags)


def tried_in_study(study: optuna.Study, suggestion: str) -> float | None:
    """The best tokens/s any measured trial got with every `key=value` of `suggestion` that the
    study searched (None when it tried none): evidence beside an arithmetic bound."""
    wanted = dict(re.findall(r"([\w.]+)=(\S+)", suggestion))
    searched = {k for t in study.get_trials(deepcopy=False) for k in t.params}
    wanted = {k: v for k, v in wanted.items() if k in searched}
    if not wanted:
        return None
    best = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        tps = (t.user_attrs.get("metrics") or {}).get("tokens_per_s")
        if tps and all(str(t.params.get(k)).lower() == v.lower() for k, v in wanted.items()):
            best = tps if best is None else max(best, tps)
    return best


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
