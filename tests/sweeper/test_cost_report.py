"""sweeper/report/time_to_train.py and tracking.cost_metrics: the start and the winner, priced."""

from __future__ import annotations

import pytest

from sweeper.report.time_to_train import cost_lines, run_cost
from sweeper.study.objective import ObjectiveConfig
from sweeper.tracking.names import cost_metrics


def _result(p50: float, *, compile_s: float = 0.0) -> dict:
    return {
        "status": "complete",
        "tokens_per_step": 1_048_576,
        "compile_s": compile_s,
        "step_time_s": {"p50": p50, "n": 10},
        "checkpoint_s": [],
        "config": {"checkpoint": {"every_steps": 0}},
        "device": {"name": "H200"},
    }


CFG = ObjectiveConfig(name="time_to_train", planned_steps=9537)


def test_the_seed_priced_at_a_given_price() -> None:
    c = run_cost([_result(21.0)], objective=CFG, usd_per_hour=2.0, trial=0)
    assert round(c["time_to_train_h"], 1) == 55.6
    assert c["usd_per_1b_tokens"] == pytest.approx(
        9537 * 21 / 3600 * 2.0 / (9537 * 1_048_576 / 1e9)
    )


def test_the_median_run_represents_the_config_and_no_price_means_hours_only() -> None:
    runs = [_result(30.0), _result(21.0), _result(10.0)]
    c = run_cost(runs, objective=CFG, trial=3, basis="median of 3 verified run(s)")
    assert c["steps_h"] == pytest.approx(9537 * 21 / 3600)
    assert c["usd_per_1b_tokens"] is None
    lines = cost_lines({"start": c, "winner": None})
    assert "9,537 steps of 1,048,576" in lines[0] and "55.6 h" in lines[1]
    assert "no price" in lines[-1]
    assert cost_metrics({"start": c, "winner": None}) == {
        "cost/time_to_train_h_start": pytest.approx(c["time_to_train_h"])
    }


def test_metrics_carry_units_for_both_roles() -> None:
    start = run_cost([_result(21.0)], objective=CFG, usd_per_hour=2.0, trial=0)
    win = run_cost([_result(10.9, compile_s=60.0)], objective=CFG, usd_per_hour=2.0, trial=4)
    m = cost_metrics({"start": start, "winner": win})
    assert set(m) == {
        "cost/time_to_train_h_start",
        "cost/time_to_train_h_winner",
        "cost/usd_per_1b_tokens_start",
        "cost/usd_per_1b_tokens_winner",
    }
    assert m["cost/time_to_train_h_winner"] == pytest.approx((9537 * 10.9 + 60) / 3600)
    assert m["cost/usd_per_1b_tokens_winner"] < m["cost/usd_per_1b_tokens_start"]


def _saved(p50: float, save_s: float, every: int) -> dict:
    r = _result(p50)
    r["checkpoint_s"] = [save_s]
    r["config"] = {"checkpoint": {"every_steps": every}}
    return r


def test_the_production_plan_is_the_objectives_interval_from_the_measured_save() -> None:
    """One rule for the interval best.yaml pins and the one its cost is priced at: the engine
    makes the winner's plan once (production_plan) and hands it to sweep_costs."""
    from hydra_plugins.throughput_sweeper.config import CostConf
    from sweeper.report.handoff import plan_from_results
    from sweeper.report.time_to_train import production_plan

    runs = [_saved(21.0, 18.7, 50)]
    objective = ObjectiveConfig(
        name="time_to_train", planned_steps=9537, planned_checkpoint_every=200
    )
    cost = CostConf(mtbf_h=1000.0)
    plan = production_plan(runs, objective=objective, cost=cost)
    assert plan is not None and plan == plan_from_results(
        runs, mtbf_h=1000.0, planned_every=200, planned_steps=9537
    )
    assert plan.every_steps <= 200  # the objective's cap
    assert production_plan(runs, objective=objective, cost=None) is None
    assert production_plan([_result(21.0)], objective=objective, cost=cost) is None  # no save
