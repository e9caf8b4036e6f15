"""Verification: the search's contenders re-measured in fresh processes, and a typed winner.

The top-k distinct configs within verify.within of the best objective value, plus the starting
config, raced in shuffled rounds with real full optimizer steps, never projected
(sweeper/verify/race_rounds.py); the race's verdict (sweeper/verify/winner.py `race_verdict`) names
the winner.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.context import SweepContext
from sweeper.launch.batch import REAL_STEPS, ready_point
from sweeper.launch.threads import uncapped
from sweeper.study.objective import direction
from sweeper.study.optuna_study import trial_result
from sweeper.verify.guard import guard_entrants
from sweeper.verify.race_rounds import RaceRecord, lead_over_start, run_race, stop_if_disk_full
from sweeper.verify.race_rules import Standing
from sweeper.verify.race_stats import Comparison
from sweeper.verify.winner import Candidate, Verdict, race_verdict
from train.core.keys import THREADS

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Winner:
    """The verified winner: its trial, its candidate, the verdict and its fresh runs' results."""

    number: int  # the search trial that first measured the config
    trial: FrozenTrial
    candidate: Candidate
    verdict: Verdict
    results: list[dict] = field(hash=False)  # its verification runs' results, in round order
    outcome: str = ""  # how the race ended: decided | equivalent | not significant
    rounds: int = 0  # rounds the race ran
    lead_over_start: Comparison | None = None  # its speed over the starting config's, paired
    # the numerics guard's record (sweeper/verify/guard.py): passed, not needed, or off, and why
    numerics_guard: dict | None = field(default=None, hash=False)


@dataclass(frozen=True, kw_only=True)
class Verification:
    """What verification measured: a row per verified config (best tokens/s first), each
    candidate's results by trial number, and the winner (None when nothing could be verified)."""

    rows: list[dict]
    results: dict[int, list[dict]]
    winner: Winner | None
    notes: list[str] = field(default_factory=list)  # the report's lines (the numerics guard's)


NOTHING_VERIFIED = Verification(rows=[], results={}, winner=None)


def find_baseline(study: optuna.Study, params: dict | None) -> FrozenTrial | None:
    """The completed trial that measured the starting config, if any."""
    if params is None:
        return None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("baseline") or t.params == params:
            return t
    return None


def contenders(
    study: optuna.Study, top_k: int, *, maximize: bool, within: float
) -> list[FrozenTrial]:
    """The best `top_k` distinct configs that could still win on noise (within `within` of the
    best objective value: verify.within), best first."""
    complete = list(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    complete.sort(key=lambda t: t.value, reverse=maximize)
    best = complete[0].value
    top, seen = [], set()
    for t in complete:
        if not (t.value >= within * best if maximize else t.value * within <= best):
            continue
        key = json.dumps(t.params, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            top.append(t)
        if len(top) == top_k:
            break
    return top


def verify(ctx: SweepContext, *, baseline: dict | None) -> Verification:
    """Re-measure the contenders and the starting config; the rows and the noise-aware winner."""
    study = ctx.study
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        log.error("no trial completed: nothing to verify or export")
        return NOTHING_VERIFIED
    base_trial = find_baseline(study, baseline)
    start = base_trial.number if base_trial is not None else None
    cands = race_entrants(ctx, base_trial)
    guard = guard_entrants(ctx, cands, baseline=baseline, start=start)  # math kept, or not raced
    cands = guard.passed
    if not cands:
        log.error(
            "every contender failed the numerics guard and the starting config was not "
            "measured: nothing is exported (see the numerics guard lines above)"
        )
        return Verification(rows=[], results={}, winner=None, notes=guard.notes)
    record, standing = run_race(cands, ctx)
    results = {n: [r for r in record.results[n] if r is not None] for n in cands}
    if standing.outcome is None:
        stop_if_disk_full(record)  # a full disk is said as one, not as failed runs
        log.error("every verification run failed: no winner is exported")
        return Verification(rows=[], results=results, winner=None, notes=guard.notes)
    number, verdict, lead = _judge(ctx, cands, record, standing, start=start)
    rows = verified_rows(study, cands, results, winner=number, start=start)
    _tag_winner(ctx, number)
    winner = Winner(
        number=number,
        trial=study.trials[number],
        candidate=verdict.winner,
        verdict=verdict,
        results=results[number],
        outcome=standing.outcome,
        rounds=standing.rounds,
        lead_over_start=lead,
        numerics_guard=guard.records.get(number),
    )
    return Verification(rows=rows, results=results, winner=winner, notes=guard.notes)


def race_entrants(ctx: SweepContext, base_trial: FrozenTrial | None) -> dict[int, Candidate]:
    """The race's candidates by trial number: the contenders, and the starting config beside them
    whatever its search rank, so the report compares like with like (the same rounds, the same
    real full steps). Logs who races and for how many rounds."""
    maximize = direction(ctx.objective) == "maximize"
    v = ctx.settings.verify
    top = contenders(ctx.study, v.top_k, maximize=maximize, within=v.within)
    start_added = base_trial is not None and all(t.number != base_trial.number for t in top)
    if start_added:
        top.append(base_trial)
    cands = {t.number: _candidate(ctx, t) for t in top}
    _say_uncapped(ctx, cands)
    if start_added:
        which = f"the top {len(cands) - 1} and the starting config"
    elif base_trial is not None:
        which = f"the top {len(cands)}, the starting config among them"
    else:
        which = f"the top {len(cands)}"
    log.info(
        "verifying %d config%s (%s) in a race of %d to %d rounds: each round runs every survivor "
        "once, in a shuffled order, with real full optimizer steps (never projected)",
        len(cands),
        "s" if len(cands) != 1 else "",
        which,
        v.repeats,
        v.last_round,
    )
    return cands


def _say_uncapped(ctx: SweepContext, cands: dict[int, Candidate]) -> None:
    """Log the torch threads the race runs at where it lifted the launcher's thread cap (the
    override `uncapped` appended last)."""
    lifted = {c.overrides[-1] for c in cands.values() if c.overrides[-1].startswith(THREADS)}
    if lifted:
        log.info(
            "the race runs one config at a time without %s's thread cap: %s, as the production "
            "run gets (torch's default in a fresh process here)",
            type(ctx.jobs.launcher).__name__,
            ", ".join(sorted(lifted)),
        )


def _candidate(ctx: SweepContext, trial: FrozenTrial) -> Candidate:
    """A search trial's config as a race candidate: its overrides run real full steps, at the
    production run's torch threads where the launcher caps its jobs' (sweeper/launch/threads.py)."""
    space = ctx.space
    point, limits = ready_point(space, ctx.settings, trial.params, race=True)
    overrides = [*ctx.fixed, *point.overrides(), *REAL_STEPS, *limits]
    launcher = type(ctx.jobs.launcher).__name__
    return Candidate(
        key=json.dumps(trial.params, sort_keys=True, default=str),
        params=dict(trial.params),
        overrides=uncapped(overrides, base=space.base, launcher=launcher),
        values=[],
        simplicity=space.defaults_distance(trial.params, space.base),
        point=point,
    )


def _judge(
    ctx: SweepContext,
    cands: dict[int, Candidate],
    record: RaceRecord,
    standing: Standing,
    *,
    start: int | None,
) -> tuple[int, Verdict, Comparison | None]:
    """The race's verdict, the winner's trial number, and the winner's paired lead over the
    starting config."""
    verdict = race_verdict(
        cands,
        standing,
        direction=direction(ctx.objective),
        noise_floor=ctx.settings.verify.noise_floor,
    )
    number = next(n for n, c in cands.items() if c is verdict.winner)
    lead = lead_over_start(record, ctx, winner=number, start=start)
    return number, verdict, lead


def verified_rows(
    study: optuna.Study,
    cands: dict[int, Candidate],
    results: dict[int, list[dict]],
    *,
    winner: int,
    start: int | None,
) -> list[dict]:
    """A row per candidate with a verified run: the winner first, the rest by verified median."""
    rows = []
    for n, c in cands.items():
        if not results[n]:
            continue
        row = verified_row(n, c, results[n], winner=n == winner)
        row.update(search_basis(study.trials[n]))
        row["start"] = n == start
        rows.append(row)
    rows.sort(key=lambda r: (not r["winner"], -r["tokens_per_s"]))
    return rows


def _tag_winner(ctx: SweepContext, number: int) -> None:
    """The winner tagged on its MLflow run (the study's verdict record is the report's:
    sweeper/report/verdict_text.py `record_verdict`)."""
    run_id = ctx.study.trials[number].user_attrs.get("mlflow_run_id")
    if run_id:
        ctx.tracker.tag_winner(run_id)


def search_basis(trial: FrozenTrial) -> dict:
    """What the search measured for a trial: its tokens/s and whether it was projected from
    short steps (train/trial/measurement.py), to print beside the verified real full steps."""
    result = trial_result(trial) or {}
    return {
        "search_tokens_per_s": result.get("tokens_per_s"),
        "search_projected": result.get("projection") is not None,
    }


def verified_row(number: int, cand: Candidate, results: list[dict], *, winner: bool) -> dict:
    """Medians over a candidate's fresh runs, and the spread of its tokens/s."""
    tps = [r["tokens_per_s"] for r in results]
    mean = statistics.fmean(tps)
    cv = statistics.stdev(tps) / mean if len(tps) > 1 and mean > 0 else 0.0

    def med(fn):
        vals = [v for v in (fn(r) for r in results) if v is not None]
        return statistics.median(vals) if vals else None

    return {
        "trial": number,
        "winner": winner,
        "params": cand.params,
        "tokens_per_s": statistics.median(tps),
        "tokens_per_s_runs": tps,
        "cv": cv if math.isfinite(cv) else None,
        "n": len(tps),
        "step_time_s": med(lambda r: r["step_time_s"]["p50"]),
        "mfu_spec": med(lambda r: r["mfu"]["spec"]),
        "mfu_ceiling": med(lambda r: r["mfu"]["ceiling"]),
        # the float8 matmuls its runs ran (train/core/result.py Float8): its MFU is then
        # bf16-equivalent; None: no float8
        "float8": next((r["float8"] for r in results if r.get("float8")), None),
        "data_wait_frac": med(lambda r: r["time_frac"]["data_wait"]),
        "objective_median": statistics.median(cand.values),
    }
