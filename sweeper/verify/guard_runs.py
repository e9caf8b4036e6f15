"""The numerics guard's curve runs (sweeper/verify/guard.py decides who races from them): the
starting config's reference curves, one per seed, all trained in one process (trial.seeds), and
each contender's run from the reference's first seed on the same batches, judged against the
reference's curve (sweeper/verify/guard_rules.py). Each run is a fresh trial process launched
through the sweep's jobs and each curve logged to MLflow (sweeper/verify/guard_log.py); a point
predicted not to fit runs the same math at the nearest point that fits (sweeper/space/fit.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sweeper.context import SweepContext
from sweeper.plan.guard_price import SAME_BATCHES, curve_run_keys
from sweeper.settings import GuardConf
from sweeper.space.fit import nearest_fit
from sweeper.space.limits import limit_overrides, point_limits
from sweeper.space.math_keys import changes_text
from sweeper.space.point import Point
from sweeper.verify.guard_log import log_guard_run
from sweeper.verify.guard_rules import GuardCheck, Tolerance, check
from sweeper.verify.guard_text import check_text
from sweeper.verify.winner import Candidate
from train.core.curve import curve_lrs, loss_curve, seed_curves

log = logging.getLogger(__name__)

# a contender the guard could not judge (no budget, no reference that trained, its run cut): it
# does not race, as a failed one does not, but nothing says its math is wrong
NOT_CHECKED = "not checked"


def reference_point(ctx: SweepContext, baseline: dict | None) -> tuple[Point, str]:
    """The starting config's point for the reference runs, and what was changed to make it fit
    ('' when nothing was): where it is predicted not to fit, the nearest point with the same math
    that does (sweeper/space/fit.py), so its curve runs do not run out of memory."""
    space = ctx.space
    point = space.point(baseline) if baseline is not None else Point()
    fit = nearest_fit(point, space.ctx)
    if fit is None or not fit.changed:
        return point, ""
    refit = (
        f"the starting config does not fit ({fit.reason}); its reference runs train the same "
        f"math at {fit.text()}"
    )
    log.info("numerics guard: %s", refit)
    return fit.point.with_fit(fit), refit


def _contender_point(
    ctx: SweepContext, c: Candidate, reference: Mapping[str, Any]
) -> tuple[Point, str]:
    """Contender `c`'s point for its curve run, on the reference's batches (its micro-batch split
    pinned to the reference's), with the nearest recompute lever that fits where it does not fit
    at that micro-batch; and what was changed for memory ('' when nothing was)."""
    space = ctx.space
    point = c.point
    for key in SAME_BATCHES:  # the reference's batches, whatever split the contender runs
        if key in reference and point.get(key, reference[key]) != reference[key]:
            point = point.with_knob(key, reference[key])
    fit = nearest_fit(point, space.ctx, keep_micro_batch=True)
    if fit is None or not fit.changed:
        return point, ""
    return fit.point.with_fit(fit), f"at {fit.text()} to fit the reference's micro-batch"


def _curve_job(
    ctx: SweepContext, point: Point, rules: GuardConf, *, seed: int, seeds: int = 1
) -> list[str]:
    """A curve run's overrides: the sweep's fixed ones, the point, the curve keys (`seeds`
    curves from `seed` on, in one process) and limits."""
    space = ctx.space
    run = point.with_knobs(curve_run_keys(point, space.ctx, rules, seed=seed, seeds=seeds))
    budget = ctx.settings.budget
    limits = point_limits(
        run,
        space.ctx,
        timeout_s=budget.trial_timeout_s,
        stall_timeout_s=budget.stall_timeout_s,
    )
    return [
        *ctx.fixed,  # the curve keys below override any of them: Hydra applies the last
        *run.overrides(),
        *limit_overrides(limits),
    ]


def reference_curves(
    ctx: SweepContext,
    ref_point: Point,
    rules: GuardConf,
    *,
    seed0: int,
    start: int | None,
) -> tuple[dict[int, list[float]], str, list[float]]:
    """The starting config's curve by seed (the failed ones left out), why curves failed, and
    the lr of each step the curves trained at (the production schedule's first steps). Every
    seed trains in one process (trial.seeds, train/trial/seeds.py): one set-up and one compile,
    the weights drawn again for each next seed."""
    (out,) = ctx.jobs.launch([_curve_job(ctx, ref_point, rules, seed=seed0, seeds=rules.seeds)])
    by_seed, why = seed_curves(out.get("result"), seed0=seed0, seeds=rules.seeds)
    curves, failures, lrs = {}, [], curve_lrs(out.get("result"))
    for seed in range(seed0, seed0 + rules.seeds):
        curve = by_seed.get(seed)
        if curve is None:
            reason = why.get(seed) or out.get("reason") or "no loss curve"
            failures.append(f"seed {seed}: {out['state']} ({reason})")
        else:
            curves[seed] = curve
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
        log.warning("numerics guard: reference curve(s) failed: %s", "; ".join(failures))
    return curves, "; ".join(failures), lrs


def judge_contender(
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
            reason=check_text(result),
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
