"""The numerics guard: before a contender whose math differs from the starting config's may race
(and so win and be exported), it must keep the starting config's loss curve.

The math-changing keys are sweeper/space/math_keys.py's. The guard trains the starting config (the
reference) from `guard.seeds` seeds, all in one process (train/trial/seeds.py), and every contender
that changes a math key once, from the reference's first seed on the same batches
(train/core/curve.py: the same seed and the same micro-batch split draw the same batches); each run
is `guard.steps` optimizer steps. The tolerance is k x the reference's own seed-to-seed spread,
measured here, at least a floor (sweeper/verify/guard_rules.py). A contender outside it fails the
guard: recorded in the study (user attr `numerics_guard`) with its reason and both curves, tagged in
MLflow, and left out of the race, so it can never be exported; the race picks among the rest (the
starting config always passes). Contenders that change no math key race unguarded. The curve runs
themselves are sweeper/verify/guard_runs.py's.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.context import SweepContext
from sweeper.plan.guard_price import curve_run_keys, guard_mode
from sweeper.settings import GuardConf, SweepSettings
from sweeper.space.math_keys import changes_text, math_changes
from sweeper.space.point import Point
from sweeper.space.search_space import SearchSpace
from sweeper.study.optuna_study import trial_result
from sweeper.verify.guard_log import tag_sweep
from sweeper.verify.guard_rules import (
    Descent,
    Tolerance,
    curve_run_s,
    curve_text,
    descent,
    tolerance,
    window_size,
)
from sweeper.verify.guard_runs import (
    NOT_CHECKED,
    judge_contender,
    reference_curves,
    reference_point,
)
from sweeper.verify.guard_text import descent_text, mode_text, tolerance_text
from sweeper.verify.winner import Candidate
from train.core.keys import SEED, TOKENS_PER_STEP

log = logging.getLogger(__name__)

GUARD_ATTR = "numerics_guard"  # study user attr: the guard's settings, tolerance and verdicts
DEFAULT_SEED = 1337  # train/core/config.py RuntimeConfig.seed, for a base config that lacks it


@dataclass(kw_only=True)
class GuardOutcome:
    """Who may race, each contender's guard record (best.yaml's provenance), the report lines."""

    passed: dict[int, Candidate]
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def searched_values(space: SearchSpace) -> dict[str, list[Any] | None]:
    """{key: its values, None for a range} of every searched key."""
    return {p.key: p.values() for p in space.searched}


def curve_price_s(
    space: SearchSpace,
    rules: GuardConf,
    ref_point: Point,
    start_result: dict | None,
    *,
    seeds: int = 1,
) -> float | None:
    """One curve run's wall (of `seeds` curves in one process: the reference's), from the
    starting config's own trial (its step scaled to the curve step's tokens); None without a
    usable result (the caller takes the trials' median)."""
    tokens = space.ctx.tokens_per_step  # a curve step may hold fewer (guard.tokens)
    share = (
        curve_run_keys(ref_point, space.ctx, rules, seed=0).get(TOKENS_PER_STEP, tokens) / tokens
    )
    return curve_run_s(start_result, steps=seeds * rules.steps, step_share=share)


def guard_runs(
    space: SearchSpace,
    rules: GuardConf,
    ref_point: Point,
    start_result: dict | None,
    *,
    contenders: int,
) -> tuple[int, float | None]:
    """The guard's curve processes (the reference's seeds in one, one per contender) and their
    mean wall, or, without a usable starting result, a run per seed and None (the caller prices
    each at the trials' median)."""
    one = curve_price_s(space, rules, ref_point, start_result)
    ref = curve_price_s(space, rules, ref_point, start_result, seeds=rules.seeds)
    if one is None or ref is None:
        return rules.seeds + contenders, None
    runs = 1 + contenders
    return runs, (ref + contenders * one) / runs


def guard_reserve_s(study: optuna.Study, *, space: SearchSpace, settings: SweepSettings) -> float:
    """The wall the guard will need as the study stands, so the search leaves room for it as it
    does for the race (sweeper/study/budget.py): the reference's seeds (in one process) and one
    run of each of the race's top k that changes the math, at their curve runs' price; 0 when
    the guard is off or no such contender is among them."""
    rules = settings.guard
    if not guard_mode(rules, searched_values(space)).on:
        return 0.0
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return 0.0
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    top = sorted(done, key=lambda t: t.value, reverse=maximize)[: settings.verify.top_k]
    start = next((t for t in done if t.user_attrs.get("baseline")), None)
    base = space.base
    start_point = space.point(start.params) if start is not None else Point()
    reference = start_point.over(base)
    changing = sum(
        1
        for t in top
        if math_changes(
            reference, space.point(t.params).over(base), device_type=space.ctx.device_type
        )
    )
    if not changing:
        return 0.0
    walls = [t.user_attrs["wall_s"] for t in done if "wall_s" in t.user_attrs]
    runs, run_s = guard_runs(
        space,
        rules,
        start_point,
        trial_result(start) if start is not None else None,
        contenders=changing,
    )
    if run_s is None:
        run_s = statistics.median(walls) if walls else 0.0
    return runs * run_s


def guard_entrants(
    ctx: SweepContext, cands: dict[int, Candidate], *, baseline: dict | None, start: int | None
) -> GuardOutcome:
    """The race's entrants that pass the guard (all of them when it is off or nothing changes
    the math), with each one's record and the report's lines."""
    rules = ctx.settings.guard
    mode = guard_mode(rules, searched_values(ctx.space))
    why = mode_text(mode)
    if not mode.on:
        off = {n: {"verdict": "off", "why": why} for n in cands}
        return GuardOutcome(passed=cands, records=off)
    ref_point, refit = reference_point(ctx, baseline)
    reference = ref_point.over(ctx.space.base)
    guarded = _math_changes(ctx, cands, reference)
    records = {
        n: {"verdict": "not needed", "why": "the starting config's math"}
        for n in cands
        if n not in guarded
    }
    if not guarded:
        log.info("numerics guard %s: no contender changes the math", why)
        ctx.study.set_user_attr(GUARD_ATTR, {"why": why, "candidates": {}})
        return GuardOutcome(passed=cands, records=records)
    log.info(
        "numerics guard %s: %d contender(s) change the math (%s); training the starting "
        "config from %d seeds and each of them for %d steps",
        why,
        len(guarded),
        "; ".join(f"trial {n}: {changes_text(ch)}" for n, ch in guarded.items()),
        rules.seeds,
        rules.steps,
    )
    seed0 = int(reference.get(SEED, DEFAULT_SEED))
    start_result = trial_result(ctx.study.trials[start]) if start is not None else None
    runs, run_s = guard_runs(  # run_s None: priced at the trials' median
        ctx.space, rules, ref_point, start_result, contenders=len(guarded)
    )
    if not ctx.budget.verify_round_fits(ctx.study, runs, run_s=run_s):
        return _out_of_budget(ctx, cands, guarded, records, runs=runs, why=why)
    return _judge_guarded(
        ctx,
        cands,
        guarded,
        records,
        reference=reference,
        ref_point=ref_point,
        refit=refit,
        seed0=seed0,
        start=start,
    )


def _judge_guarded(
    ctx: SweepContext,
    cands: dict[int, Candidate],
    guarded: dict[int, dict],
    records: dict[int, dict],
    *,
    reference: dict[str, Any],
    ref_point: Point,
    refit: str,
    seed0: int,
    start: int | None,
) -> GuardOutcome:
    """Train the reference from its seeds, measure the tolerance, and judge each `guarded`
    contender against the reference's first seed; the others race unguarded. Records the guard's
    summary in the study."""
    rules = ctx.settings.guard
    ref_curves, ref_fail, ref_lrs = reference_curves(
        ctx, ref_point, rules, seed0=seed0, start=start
    )
    tol, trained = _reference_tolerance(ctx, rules, ref_curves)
    no_reference = _no_reference(ref_fail, trained)
    if no_reference:
        log.warning(
            "numerics guard: %s; no contender that changes the math is judged", no_reference
        )
    outcome = GuardOutcome(passed={}, records=records)
    summary = _summary(
        rules,
        seed0=seed0,
        refit=refit,
        ref_curves=ref_curves,
        ref_lrs=ref_lrs,
        tol=tol,
        trained=trained,
    )
    for n, c in cands.items():
        if n not in guarded:
            outcome.passed[n] = c
            continue
        rec = judge_contender(
            ctx,
            n,
            c,
            guarded[n],
            reference=reference,
            tol=tol,
            ref_curve=ref_curves.get(seed0),
            no_reference=no_reference,
            rules=rules,
            seed0=seed0,
        )
        shared = ("steps", "seed", "k", "floor", "reference_refit", "tolerance")
        rec.update({k: summary[k] for k in shared})
        outcome.records[n] = rec
        summary["candidates"][str(n)] = rec
        if rec["verdict"] == "passed":
            outcome.passed[n] = c
        outcome.notes.extend(_report_lines(n, rec, seed0=seed0))
    outcome.notes[:0] = _lead_notes(
        tol, ref_curves.get(seed0), seed0=seed0, no_reference=no_reference, refit=refit
    )
    ctx.study.set_user_attr(GUARD_ATTR, summary)
    return outcome


def _math_changes(
    ctx: SweepContext, cands: dict[int, Candidate], reference: dict[str, Any]
) -> dict[int, dict]:
    """{trial: what it changes} of every contender whose math differs from `reference`'s."""
    space = ctx.space
    changed = {
        n: math_changes(reference, c.point.over(space.base), device_type=space.ctx.device_type)
        for n, c in cands.items()
    }
    return {n: ch for n, ch in changed.items() if ch}


def _reference_tolerance(
    ctx: SweepContext, rules: GuardConf, ref_curves: dict[int, list[float]]
) -> tuple[Tolerance | None, Descent | None]:
    """The tolerance the reference's seeds measure and whether they trained; (None, None) with
    fewer than two curves."""
    if len(ref_curves) < 2:
        return None, None
    tol = tolerance(ref_curves, k=rules.k, floor=rules.floor, window=window_size(rules.steps))
    log.info("numerics guard: %s", tolerance_text(tol))
    tag_sweep(ctx.tracker, tol)
    return tol, descent(ref_curves, spread=tol.spread, window=tol.window)


def _summary(
    rules: GuardConf,
    *,
    seed0: int,
    refit: str,
    ref_curves: dict[int, list[float]],
    ref_lrs: list[float],
    tol: Tolerance | None,
    trained: Descent | None,
) -> dict[str, Any]:
    """The guard's study record (GUARD_ATTR) before any contender is judged: its settings, the
    reference's curves, descent and tolerance; each contender's record joins its candidates."""
    return {
        "steps": rules.steps,
        "seed": seed0,
        "k": rules.k,
        "floor": rules.floor,
        "reference_refit": refit,
        "reference_curves": {str(s): c for s, c in ref_curves.items()},
        "reference_lr": ref_lrs,
        "reference_descent": None
        if trained is None
        else {
            "drop": trained.drop,
            "seed": trained.seed,
            "spread": trained.spread,
            "trains": trained.trains,
        },
        "tolerance": {**tol.as_dict(), "derivation": tolerance_text(tol)} if tol else None,
        "candidates": {},
    }


def _lead_notes(
    tol: Tolerance | None,
    ref_curve: list[float] | None,
    *,
    seed0: int,
    no_reference: str,
    refit: str,
) -> list[str]:
    """The report's lines before the contenders': the reference's refit, the tolerance, why
    nothing is judged, and the reference's curve (`ref_curve`: seed `seed0`'s), where there is a
    tolerance."""
    lines = [f"numerics guard: {refit}"] if refit else []
    if tol is not None and ref_curve is not None:
        lines.append(f"numerics guard: {tolerance_text(tol)}")
        if no_reference:
            lines.append(f"numerics guard: {no_reference}")
        lines.append(f"  loss by step, starting config (seed {seed0}): {curve_text(ref_curve)}")
    return lines


def _no_reference(ref_fail: str, trained: Descent | None) -> str:
    """Why there is no reference to judge against ('' when there is one): its runs failed, or
    its curves did not train."""
    if trained is None:
        return f"the starting config's curve runs failed ({ref_fail or 'too few seeds'})"
    if not trained.trains:
        return f"the reference did not train ({descent_text(trained)})"
    return ""


def _out_of_budget(
    ctx: SweepContext,
    cands: dict[int, Candidate],
    guarded: dict[int, dict],
    records: dict[int, dict],
    *,
    runs: int,
    why: str,
) -> GuardOutcome:
    """The guard's runs do not fit the wall budget: the contenders that change the math are not
    checked, so they do not race (unchecked math is never exported); the others race."""
    setting = getattr(ctx.budget, "wall_setting", "budget.max_wall_s")
    reason = (
        f"the guard's {runs} curve runs do not fit the wall budget "
        f"(hydra.sweeper.{setting}={ctx.settings.budget.max_wall_s:g} s); raise it, or set "
        f"hydra.sweeper.guard.mode=off to race unchecked math"
    )
    outcome = GuardOutcome(
        passed={n: c for n, c in cands.items() if n not in guarded}, records=dict(records)
    )
    for n, ch in guarded.items():
        outcome.records[n] = {"verdict": NOT_CHECKED, "changes": changes_text(ch), "reason": reason}
        outcome.notes.extend(_report_lines(n, outcome.records[n], seed0=0))
    log.warning(
        "numerics guard %s: %s; trial(s) %s do not race", why, reason, ", ".join(map(str, guarded))
    )
    ctx.study.set_user_attr(
        GUARD_ATTR,
        {"why": why, "candidates": {str(n): r for n, r in outcome.records.items() if n in guarded}},
    )
    return outcome


def _report_lines(n: int, rec: dict[str, Any], *, seed0: int) -> list[str]:
    """What the final report says about contender `n`: the verdict, why, and both curves."""
    verdict = rec["verdict"]
    tail = "" if verdict == "passed" else ": not raced, never exported"
    if verdict == NOT_CHECKED:
        return [f"numerics guard: trial {n} ({rec['changes']}) NOT CHECKED{tail}; {rec['reason']}"]
    lines = [
        f"numerics guard: trial {n} ({rec['changes']}) {verdict.upper()}{tail}; {rec['reason']}"
    ]
    if rec.get("refit"):
        lines.append(f"  its curve run: {rec['refit']} (no math changed)")
    if rec.get("curve"):
        lines.append(
            f"  loss by step, trial {n} (seed {seed0}, same batches): {curve_text(rec['curve'])}"
        )
    return lines
