"""The numerics guard: before a contender whose math differs from the starting config's may race
(and so win and be exported), it must keep the starting config's loss curve.

The math-changing keys are sweeper/space/math_keys.py's. The guard trains the starting config
(the reference) `guard.seeds` times, one seed each, and every contender that changes a
math key once, from the reference's first seed on the same batches (train/core/curve.py: the same
seed and the same micro-batch split draw the same batches); each run is `guard.steps`
optimizer steps. The tolerance is k x the reference's own seed-to-seed spread, measured here, at
least a floor (sweeper/verify/guard_rules.py). A contender outside it fails the guard: recorded
in the study (user attr `numerics_guard`) with its reason and both curves, tagged in MLflow, and
left out of the race, so it can never be exported; the race picks among the rest (the starting
config always passes). Contenders that change no math key race unguarded.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.context import SweepContext
from sweeper.plan.guard_price import SAME_BATCHES, curve_run_keys, guard_mode
from sweeper.settings import GuardConf, SweepSettings
from sweeper.space.fit import nearest_fit
from sweeper.space.limits import limit_overrides, point_limits
from sweeper.space.math_keys import changes_text, math_changes
from sweeper.space.overrides import format_override
from sweeper.space.space import SearchSpace
from sweeper.study.study import trial_result
from sweeper.verify.guard_log import log_guard_run, tag_sweep
from sweeper.verify.guard_rules import (
    Descent,
    GuardCheck,
    Tolerance,
    check,
    curve_run_s,
    curve_text,
    descent,
    tolerance,
    window_size,
)
from sweeper.verify.winner import Candidate
from train.core.curve import curve_lrs, loss_curve

log = logging.getLogger(__name__)

# a contender the guard could not judge (no budget, no reference that trained, its run cut): it
# does not race, as a failed one does not, but nothing says its math is wrong
NOT_CHECKED = "not checked"
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
    space: SearchSpace, rules: GuardConf, ref_point: dict[str, Any], start_result: dict | None
) -> float | None:
    """One curve run's wall, from the starting config's own trial (its step scaled to the curve
    step's tokens); None without a usable result (the caller takes the trials' median)."""
    tokens = space.ctx.tokens_per_step  # a curve step may hold fewer (guard.tokens)
    share = (
        curve_run_keys(ref_point, space.ctx, rules, seed=0).get("batch.tokens_per_step", tokens)
        / tokens
    )
    return curve_run_s(start_result, steps=rules.steps, step_share=share)


def guard_reserve_s(study: optuna.Study, *, space: SearchSpace, settings: SweepSettings) -> float:
    """The wall the guard will need as the study stands, so the search leaves room for it as it
    does for the race (sweeper/study/budget.py): the reference's seeds and one run of each of the
    race's top k that changes the math, at a curve run's price; 0 when the guard is off or no
    such contender is among them."""
    rules = settings.guard
    on, _ = guard_mode(rules, searched_values(space))
    if not on:
        return 0.0
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return 0.0
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    top = sorted(done, key=lambda t: t.value, reverse=maximize)[: settings.verify.top_k]
    start = next((t for t in done if t.user_attrs.get("baseline")), None)
    base = dict(space.ctx.base)
    reference = {**base, **(space.point(start.params) if start is not None else {})}
    changing = sum(
        1
        for t in top
        if math_changes(
            reference, {**base, **space.point(t.params)}, device_type=space.ctx.device_type
        )
    )
    if not changing:
        return 0.0
    walls = [t.user_attrs["wall_s"] for t in done if "wall_s" in t.user_attrs]
    run_s = curve_price_s(
        space,
        rules,
        space.point(start.params) if start else {},
        trial_result(start) if start is not None else None,
    )
    if run_s is None:
        run_s = statistics.median(walls) if walls else 0.0
    return (rules.seeds + changing) * run_s


def guard_entrants(
    ctx: SweepContext, cands: dict[int, Candidate], *, baseline: dict | None, start: int | None
) -> GuardOutcome:
    """The race's entrants that pass the guard (all of them when it is off or nothing changes
    the math), with each one's record and the report's lines."""
    rules = ctx.settings.guard
    on, why = guard_mode(rules, searched_values(ctx.space))
    if not on:
        off = {n: {"verdict": "off", "why": why} for n in cands}
        return GuardOutcome(passed=cands, records=off)
    base = dict(ctx.space.ctx.base)
    ref_point, refit = _reference_point(ctx, baseline)
    reference = {**base, **ref_point}
    device = ctx.space.ctx.device_type
    changed = {
        n: math_changes(reference, {**base, **ctx.space.point(c.params)}, device_type=device)
        for n, c in cands.items()
    }
    records = {
        n: {"verdict": "not needed", "why": "the starting config's math"}
        for n, ch in changed.items()
        if not ch
    }
    guarded = {n: ch for n, ch in changed.items() if ch}
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
    seed0 = int(reference.get("runtime.seed", DEFAULT_SEED))
    runs = rules.seeds + len(guarded)
    start_result = trial_result(ctx.study.trials[start]) if start is not None else None
    run_s = curve_price_s(ctx.space, rules, ref_point, start_result)  # None: trials' median
    if not ctx.budget.verify_round_fits(ctx.study, runs, run_s=run_s):
        return _out_of_budget(ctx, cands, guarded, records, runs=runs, why=why)
    ref_curves, ref_fail, ref_lrs = _reference_curves(
        ctx, ref_point, rules, seed0=seed0, start=start
    )
    tol, trained = None, None
    if len(ref_curves) >= 2:
        tol = tolerance(ref_curves, k=rules.k, floor=rules.floor, window=window_size(rules.steps))
        log.info("numerics guard: %s", tol.derivation())
        tag_sweep(ctx.tracker, tol)
        trained = descent(ref_curves, spread=tol.spread, window=tol.window)
    no_reference = _no_reference(ref_fail, trained)
    if no_reference:
        log.warning(
            "numerics guard: %s; no contender that changes the math is judged", no_reference
        )
    outcome = GuardOutcome(passed={}, records=records)
    summary: dict[str, Any] = {
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
        "tolerance": tol.as_dict() if tol else None,
        "candidates": {},
    }
    for n, c in cands.items():
        if n not in guarded:
            outcome.passed[n] = c
            continue
        rec = _guard_one(
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
        rec.update({k: summary[k] for k in ("steps", "seed", "k", "floor", "reference_refit")})
        rec["tolerance"] = summary["tolerance"]
        outcome.records[n] = rec
        summary["candidates"][str(n)] = rec
        if rec["verdict"] == "passed":
            outcome.passed[n] = c
        outcome.notes.extend(_report_lines(n, rec, seed0=seed0))
    if tol is not None and seed0 in ref_curves:
        outcome.notes[:0] = [
            f"numerics guard: {tol.derivation()}",
            f"  loss by step, starting config (seed {seed0}): {curve_text(ref_curves[seed0])}",
        ]
        if no_reference:
            outcome.notes.insert(1, f"numerics guard: {no_reference}")
    if refit:
        outcome.notes.insert(0, f"numerics guard: {refit}")
    ctx.study.set_user_attr(GUARD_ATTR, summary)
    return outcome


def _no_reference(ref_fail: str, trained: Descent | None) -> str:
    """Why there is no reference to judge against ('' when there is one): its runs failed, or
    its curves did not train."""
    if trained is None:
        return f"the starting config's curve runs failed ({ref_fail or 'too few seeds'})"
    if not trained.trains:
        return f"the reference did not train ({trained.text()})"
    return ""


def _reference_point(ctx: SweepContext, baseline: dict | None) -> tuple[dict[str, Any], str]:
    """The starting config's point for the reference runs, and what was changed to make it fit
    ('' when nothing was): where it is predicted not to fit, the nearest point with the same math
    that does (sweeper/space/fit.py), so its curve runs do not run out of memory."""
    point = ctx.space.point(baseline) if baseline is not None else {}
    fit = nearest_fit(point, ctx.space.ctx)
    if fit is None or not fit.changed:
        return point, ""
    refit = (
        f"the starting config does not fit ({fit.reason}); its reference runs train the same "
        f"math at {fit.text()}"
    )
    log.info("numerics guard: %s", refit)
    return fit.point, refit


def _contender_point(
    ctx: SweepContext, c: Candidate, reference: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """Contender `c`'s point for its curve run, on the reference's batches (its micro-batch split
    pinned to the reference's), with the nearest recompute lever that fits where it does not fit
    at that micro-batch; and what was changed for memory ('' when nothing was)."""
    point = ctx.space.point(c.params)
    for key in SAME_BATCHES:  # the reference's batches, whatever split the contender runs
        if key in reference and point.get(key, reference[key]) != reference[key]:
            point[key] = reference[key]
    fit = nearest_fit(point, ctx.space.ctx, keep_micro_batch=True)
    if fit is None or not fit.changed:
        return point, ""
    return fit.point, f"at {fit.text()} to fit the reference's micro-batch"


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


def _curve_job(
    ctx: SweepContext, point: dict[str, Any], rules: GuardConf, *, seed: int
) -> list[str]:
    """A curve run's overrides: the sweep's fixed ones, the point, the curve keys and limits."""
    keys = curve_run_keys(point, ctx.space.ctx, rules, seed=seed)
    budget = ctx.settings.budget
    limits = point_limits(
        {**point, **keys},
        ctx.space.ctx,
        timeout_s=budget.trial_timeout_s,
        stall_timeout_s=budget.stall_timeout_s,
    )
    return [
        *ctx.fixed,  # the curve keys below override any of them: Hydra applies the last
        *(format_override(k, v) for k, v in {**point, **keys}.items()),
        *limit_overrides(limits),
    ]


def _reference_curves(
    ctx: SweepContext,
    ref_point: dict[str, Any],
    rules: GuardConf,
    *,
    seed0: int,
    start: int | None,
) -> tuple[dict[int, list[float]], str, list[float]]:
    """The starting config's curve by seed (the failed runs left out), why runs failed, and the
    lr of each step the curves trained at (the production schedule's first steps)."""
    seeds = [seed0 + i for i in range(rules.seeds)]
    outs = ctx.jobs.launch([_curve_job(ctx, ref_point, rules, seed=s) for s in seeds])
    curves, failures, lrs = {}, [], []
    for seed, out in zip(seeds, outs, strict=True):
        curve = loss_curve(out.get("result"))
        if curve is None:
            failures.append(f"seed {seed}: {out['state']} ({out.get('reason') or 'no loss curve'})")
        else:
            curves[seed] = curve
            lrs = lrs or curve_lrs(out.get("result"))
        log_guard_run(
            ctx.tracker,
            number=-1 if start is None else start,
            role="reference",
            seed=seed,
            out=out,
            params=ref_point,
            curves={"guard/loss": curve or []},
            tags={},
        )
    if failures:
        log.warning("numerics guard: reference run(s) failed: %s", "; ".join(failures))
    return curves, "; ".join(failures), lrs


def _guard_one(
    ctx: SweepContext,
    n: int,
    c: Candidate,
    changes: dict,
    *,
    reference: dict[str, Any],
    tol: Tolerance | None,
    ref_curve: list[float] | None,
    no_reference: str,
    rules: GuardConf,
    seed0: int,
) -> dict[str, Any]:
    """Train contender `n` from the reference's first seed on its batches and judge its curve."""
    rec: dict[str, Any] = {"changes": changes_text(changes), "reference_curve": ref_curve}
    if tol is None or ref_curve is None or no_reference:
        rec.update(
            verdict=NOT_CHECKED, reason=no_reference or "the reference's first seed has no curve"
        )
        return rec
    point, refit = _contender_point(ctx, c, reference)
    if refit:
        rec["refit"] = refit
    (out,) = ctx.jobs.launch([_curve_job(ctx, point, rules, seed=seed0)])
    curve = loss_curve(out.get("result"))
    rec["job_dir"] = out.get("job_dir")
    result: GuardCheck | None = None
    if curve is None:
        # a curve that went non-finite is the contender's math failing; anything else (out of
        # memory, a timeout, a killed run) left it unjudged
        kind = ((out.get("result") or {}).get("failure") or {}).get("kind")
        rec.update(
            verdict="failed" if kind == "nan" else NOT_CHECKED,
            curve=None,
            reason=f"its curve run did not complete: {out['state']} "
            f"({out.get('reason') or 'no loss curve'})",
        )
    else:
        result = check(curve, ref_curve, tol)
        rec.update(
            verdict="passed" if result.passed else "failed",
            curve=curve,
            reason=result.reason,
            divergence=result.divergence.value,
            at_step=result.divergence.step,
        )
    log_guard_run(
        ctx.tracker,
        number=n,
        role="candidate",
        seed=seed0,
        out=out,
        params=point,
        curves={"guard/loss": curve or [], "guard/reference_loss": ref_curve},
        tags={
            "guard.verdict": rec["verdict"],
            "guard.reason": rec["reason"],
            "guard.changes": rec["changes"],
        },
        metrics={"guard/divergence": rec.get("divergence"), "guard/tolerance": tol.value},
    )
    level = logging.INFO if rec["verdict"] == "passed" else logging.WARNING
    log.log(
        level,
        "numerics guard: trial %d (%s) %s: %s",
        n,
        rec["changes"],
        rec["verdict"].upper(),
        rec["reason"],
    )
    return rec


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
