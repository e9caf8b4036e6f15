"""Price and time-to-train of the sweep's starting config and its winner.

For each, the production run's wall time for the planned tokens (compile once, the steady steps,
every checkpoint save's stall at the planned interval) and, when a price is known, the dollars per
billion tokens. The run is priced by sweeper/study/objective.py `result_train_time` (the
time_to_train objective's own function, on train/core/cost.py's arithmetic), from the
configuration's verified runs when it has them (the median run by predicted time), else from its
search run.

`sweep_costs` gathers the plain document that best.yaml's provenance and the MLflow parent run
carry (sweeper/tracking.py `cost_metrics`); `cost_lines` turns it into the report's lines.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sweeper.report.handoff import plan_from_results
from sweeper.study.objective import ObjectiveConfig, result_train_time
from train.core.cost import TOKENS_PER_BILLION, device_price, usd_per_1b_tokens
from train.core.handoff.interval import CheckpointPlan

if TYPE_CHECKING:
    import optuna

    from hydra_plugins.throughput_sweeper.config import CostConf
    from sweeper.verify.stage import Verification

log = logging.getLogger(__name__)

ROLES = ("start", "winner")  # the keys of the cost document, in report order


def run_cost(
    results: list[Mapping[str, Any]],
    *,
    objective: ObjectiveConfig,
    usd_per_hour: float = 0.0,
    prices: Mapping[str, float] | None = None,
    trial: int | None = None,
    basis: str = "",
) -> dict[str, Any] | None:
    """One configuration's planned run, priced, as a plain dict (None when no result is scorable).

    Each result is priced with `result_train_time`; the median run (by total time, the lower of the
    two middles) represents the configuration: a representative run, not the luckiest.
    """
    priced = []
    for r in results:
        if not r or not (r.get("step_time_s") or {}).get("p50") or not r.get("tokens_per_step"):
            continue
        priced.append((result_train_time(r, objective), r))
    if not priced:
        return None
    middle = statistics.median_low(t.total_s for t, _ in priced)
    t, r = next((t, r) for t, r in priced if t.total_s == middle)
    tokens = t.planned_steps * int(r["tokens_per_step"])
    device = (r.get("device") or {}).get("name") or ""
    price = device_price(device, usd_per_hour=usd_per_hour, prices=prices)
    usd = None
    if price is not None and t.total_s > 0:
        usd = usd_per_1b_tokens(total_s=t.total_s, planned_tokens=tokens, usd_per_hour=price)
    return {
        "trial": trial,
        "basis": basis or f"{len(priced)} run(s)",
        "device": device,
        "planned_tokens": tokens,
        "planned_steps": t.planned_steps,
        "tokens_per_step": int(r["tokens_per_step"]),
        "time_to_train_h": t.total_h,
        "steps_h": t.steps_s / 3600,
        "compile_h": t.compile_s / 3600,
        **compile_basis(r, [r for _, r in priced]),
        "checkpoint_h": t.checkpoint_s / 3600,
        "num_saves": t.num_saves,
        "usd_per_hour": price,
        "usd_per_1b_tokens": usd,
    }


def production_plan(
    results: list, *, objective: ObjectiveConfig, cost: CostConf | None
) -> CheckpointPlan | None:
    """The production checkpoint interval a configuration's runs give (Young/Daly from their
    measured save stall and `cost.mtbf_h`, sweeper/report/handoff.py): the interval its best.yaml
    would pin; None without `cost` or without a measured save."""
    if cost is None:
        return None
    return plan_from_results(
        results,
        mtbf_h=cost.mtbf_h,
        planned_every=objective.planned_checkpoint_every,
        planned_steps=objective.planned_steps,
    )


def sweep_costs(
    study: optuna.Study,
    verification: Verification,
    *,
    baseline: dict | None,
    objective: ObjectiveConfig,
    cost: CostConf | None,
    winner_plan: CheckpointPlan | None,
) -> dict[str, Any]:
    """{"start": ..., "winner": ...}: each `run_cost` or None (no starting config measured,
    nothing verified). The starting config's verified runs, else its search run, priced at
    `cost`'s rate (none: hours only). Each is priced at its own production checkpoint interval
    (`production_plan`): the winner's is `winner_plan`, the one its best.yaml pins (computed once,
    by the caller), the start's is made here."""
    from sweeper.verify.stage import find_baseline, trial_result

    doc: dict[str, Any] = {"start": None, "winner": None}

    def price(plan: CheckpointPlan | None) -> dict[str, Any]:
        at = (
            objective
            if plan is None
            else dataclasses.replace(objective, planned_checkpoint_every=plan.every_steps)
        )
        rate = {} if cost is None else {"usd_per_hour": cost.usd_per_hour, "prices": cost.prices}
        return {"objective": at, **rate}

    def price_of(results: list) -> dict[str, Any]:
        return price(production_plan(results, objective=objective, cost=cost))

    winner = verification.winner
    if winner is not None:
        doc["winner"] = run_cost(
            winner.results,
            trial=winner.number,
            basis=_basis(winner.results),
            **price(winner_plan),
        )
    base = find_baseline(study, baseline)
    if base is not None:
        runs = [r for r in verification.results.get(base.number) or [] if r]
        search = trial_result(base)
        if not runs and search:
            doc["start"] = run_cost(
                [search], trial=base.number, basis="its search run", **price_of([search])
            )
        else:
            doc["start"] = run_cost(runs, trial=base.number, basis=_basis(runs), **price_of(runs))
    return doc


def compile_basis(chosen: Mapping[str, Any], runs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """How the compile was charged (sweeper/study/objective.py compile_charge_s): the graph's
    first measured compile, cold or found in the cache, and the median compile of this config's
    runs that found the graph in the cache (what a production run that reuses best.yaml's
    compile_cache pays); {} for an eager config or results without the cache record."""
    cache = (chosen.get("compile") or {}).get("cache") or {}
    if cache.get("graph_compile_s") is None:
        return {}
    first = cache.get("graph_compile_cache")
    warm = [
        float(r["compile_s"])
        for r in runs
        if ((r.get("compile") or {}).get("cache") or {}).get("state") == "hit"
        and r.get("compile_s") is not None
    ]
    return {
        "compile_cache": "the graph's first compile, cold"
        if first in ("miss", "off", "partial")
        else "the graph's first compile, found in the cache",
        "compile_warm_s": statistics.median(warm) if warm else None,
    }


def _basis(runs: list[Mapping[str, Any]]) -> str:
    return f"median of {len(runs)} verified run(s)"


def cost_lines(doc: Mapping[str, Any]) -> list[str]:
    """The report's lines: time to train the planned tokens and $ per 1B tokens, per config."""
    costs = {role: doc.get(role) for role in ROLES if doc.get(role)}
    if not costs:
        return []
    first = next(iter(costs.values()))
    lines = [
        f"time to train {first['planned_tokens']:,} tokens ({first['planned_steps']:,} steps of "
        f"{first['tokens_per_step']:,}; compile and checkpoint stalls included):"
    ]
    same = (
        len(costs) == 2
        and doc["start"]["trial"] is not None
        and doc["start"]["trial"] == doc["winner"]["trial"]
    )
    for role, c in costs.items():
        label = "starting config" if role == "start" else "winner"
        if same and role == "winner":
            lines.append(f"  winner (trial {c['trial']}): the starting config, as above")
            continue
        lines.append(f"  {label} (trial {c['trial']}, {c['basis']}): {_breakdown(c)}; {_price(c)}")
    if not any(c["usd_per_hour"] for c in costs.values()):
        lines.append(
            "  no price: set hydra.sweeper.cost.usd_per_hour=<USD/h> (or "
            "hydra.sweeper.cost.prices) for $ per 1B tokens"
        )
    return lines


def _breakdown(c: Mapping[str, Any]) -> str:
    parts = f"{_hours(c['steps_h'])} steps + {_hours(c['compile_h'])} compile"
    if c.get("compile_cache"):  # the graph's first compile, charged alike to all its trials
        parts += f" ({c['compile_cache']}"
        if c.get("compile_warm_s") is not None:
            parts += f"; {c['compile_warm_s']:.1f} s warm from best.yaml's compile cache"
        parts += ")"
    parts += f" + {_hours(c['checkpoint_h'])} checkpoints ({c['num_saves']:,} saves)"
    return f"{_hours(c['time_to_train_h'])} ({parts})"


def _price(c: Mapping[str, Any]) -> str:
    if c["usd_per_1b_tokens"] is None:
        return f"$ per 1B tokens: no price for {c['device'] or 'this device'!r}"
    run_usd = c["usd_per_1b_tokens"] * c["planned_tokens"] / TOKENS_PER_BILLION
    return (
        f"${c['usd_per_1b_tokens']:,.2f} per 1B tokens at ${c['usd_per_hour']:,.2f}/h "
        f"(${run_usd:,.0f} for the run)"
    )


def _hours(h: float) -> str:
    """Hours as a reader wants them: 55.6 h, 12.5 min, 3.2 s."""
    if h >= 1:
        return f"{h:,.1f} h"
    if h * 60 >= 1:
        return f"{h * 60:.1f} min"
    return f"{h * 3600:.1f} s"
