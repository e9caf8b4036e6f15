"""sweeper/settings.py: the sweeper's settings are built once from Hydra's node, frozen, and a value
no sweep can run with is refused with the field named."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from hydra_plugins.throughput_sweeper.config import ThroughputSweeperConf
from sweeper.settings import SweepSettings


def test_missing_fields_take_the_schema_defaults_and_the_result_is_frozen() -> None:
    s = SweepSettings.from_config({"n_trials": 3, "_target_": "ignored"})
    assert s.n_trials == 3
    assert s.verify_top_k == ThroughputSweeperConf().verify_top_k
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.n_trials = 4  # type: ignore[misc]
    assert dataclasses.replace(s, max_wall_s=60.0).max_wall_s == 60.0


def test_a_hydra_node_becomes_plain_values() -> None:
    node = OmegaConf.structured(ThroughputSweeperConf(space={"batch.micro_batch": [4, 8]}))
    s = SweepSettings.from_config(node)
    assert s.space == {"batch.micro_batch": [4, 8]} and type(s.space) is dict


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"n_jobs": 0}, "hydra.sweeper.n_jobs must be at least 1"),
        ({"verify_repeats": 0}, "hydra.sweeper.verify_repeats must be at least 1"),
        ({"n_trials": -1}, "hydra.sweeper.n_trials must be 0"),
        ({"max_wall_s": -5.0}, "hydra.sweeper.max_wall_s must be 0"),
        ({"max_failure_rate": 1.5}, "hydra.sweeper.max_failure_rate must be a share"),
        ({"n_trails": 3}, r"unknown hydra.sweeper setting\(s\) \['n_trails'\]"),
    ],
)
def test_values_no_sweep_can_run_with_are_refused(settings, match) -> None:
    with pytest.raises(ValueError, match=match):
        SweepSettings.from_config(settings)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"planned_steps": -1}, r"hydra.sweeper.planned_steps must be 0 \(derive from"),
        ({"planned_steps": 2.5}, "hydra.sweeper.planned_steps must be 0"),
        ({"planned_tokens": 0}, "hydra.sweeper.planned_tokens must be a positive integer"),
        ({"usd_per_hour": -2.0}, r"hydra.sweeper.usd_per_hour must be >= 0 \(0 = unknown"),
        ({"prices": {"H100": -1.0}}, r"hydra.sweeper.prices\['H100'\] must be a price"),
    ],
)
def test_run_length_and_price_are_checked(settings, match) -> None:
    with pytest.raises(ValueError, match=match):
        SweepSettings.from_config(settings)


def test_cost_defaults_plan_ten_billion_tokens_and_no_price() -> None:
    s = SweepSettings.from_config({})
    assert (s.planned_steps, s.planned_tokens, s.usd_per_hour, s.prices) == (
        0,
        10_000_000_000,
        0.0,
        {},
    )
    node = OmegaConf.structured(ThroughputSweeperConf(prices={"H100": 2.5}))
    assert SweepSettings.from_config(node).prices == {"H100": 2.5}
