"""sweeper/settings.py: the sweeper's settings are built once from Hydra's node into the schema's
own frozen groups, a value no sweep can run with is refused with its dotted name, and an old flat
name is refused naming its new one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from hydra_plugins.throughput_sweeper.config import (
    RENAMED,
    VerifyConf,
    schema_node,
    setting_names,
)
from sweeper.settings import replace_in, settings_from
from train.core import keys


def test_missing_fields_take_the_schema_defaults_and_the_result_is_frozen() -> None:
    s = settings_from({"n_trials": 3, "_target_": "ignored"})
    assert s.n_trials == 3
    assert s.verify.top_k == VerifyConf().top_k
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.n_trials = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.verify.top_k = 4  # type: ignore[misc]
    walled = replace_in(s, **{"budget.max_wall_s": 60.0, "n_trials": 5})
    assert (walled.budget.max_wall_s, walled.n_trials, s.budget.max_wall_s) == (60.0, 5, 0.0)


def test_a_hydra_node_becomes_the_schemas_own_types() -> None:
    node = OmegaConf.merge(
        schema_node(), {"space": {"batch.micro_batch": [4, 8]}, "verify": {"repeats": 2}}
    )
    s = settings_from(node)
    # by name: Hydra's plugin scan may have run the schema's module again (new class objects)
    assert (type(s).__name__, type(s.verify).__name__) == ("ThroughputSweeperConf", "VerifyConf")
    assert s.space == {"batch.micro_batch": [4, 8]} and type(s.space) is dict
    assert s.verify.repeats == 2


@pytest.mark.parametrize(
    "given",
    [{"verify": {"repeats": 2}}, {"verify.repeats": 2}],
    ids=["nested", "dotted"],
)
def test_a_grouped_setting_reaches_the_typed_settings(given) -> None:
    s = settings_from(given)
    assert s.verify.repeats == 2 and s.verify.last_round == 2
    assert s.verify.top_k == VerifyConf().top_k  # the rest of the group keeps its defaults


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_every_old_flat_name_is_refused_naming_its_new_one(old: str, new: str) -> None:
    """On the command line (before Hydra composes anything) and in a mapping handed to the
    sweeper, the old name is refused in one line with its new name, never read as an alias."""
    line = f"hydra.sweeper.{old} is now hydra.sweeper.{new}"
    with pytest.raises(ValueError, match=f"^{line.replace('.', '[.]')}$"):
        keys.check_command_line(
            [f"hydra.sweeper.{old}=1"], sweeper_fields=setting_names(), sweeper_renamed=RENAMED
        )
    with pytest.raises(ValueError, match=f"^{line.replace('.', '[.]')}$"):
        settings_from({old: 1})
    assert new in setting_names()  # the new name is a setting


def test_the_new_names_pass_the_command_line_check() -> None:
    keys.check_command_line(
        [f"hydra.sweeper.{name}=1" for name in setting_names()]
        + ["hydra.sweeper.space.batch.micro_batch=4", "hydra.sweeper.cost.prices.H100=2"],
        sweeper_fields=setting_names(),
        sweeper_renamed=RENAMED,
    )
    with pytest.raises(ValueError, match=r"did you mean hydra\.sweeper\.verify\.repeats"):
        keys.check_command_line(
            ["hydra.sweeper.verify.repeat=3"],
            sweeper_fields=setting_names(),
            sweeper_renamed=RENAMED,
        )


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"n_jobs": 0}, "hydra.sweeper.n_jobs must be at least 1"),
        ({"verify.top_k": 0}, "hydra.sweeper.verify.top_k must be at least 1"),
        ({"verify.repeats": 0}, "hydra.sweeper.verify.repeats=0: a race needs at least 1 round"),
        ({"n_trials": -1}, "hydra.sweeper.n_trials must be 0"),
        ({"budget.max_wall_s": -5.0}, "hydra.sweeper.budget.max_wall_s must be 0"),
        ({"budget.max_failure_rate": 1.5}, "hydra.sweeper.budget.max_failure_rate must be a share"),
        ({"budget.polish_trials": -2}, "hydra.sweeper.budget.polish_trials must be -1"),
        ({"verify.max_rounds": -1}, "hydra.sweeper.verify.max_rounds must be 0"),
        ({"plan.software": "cuda"}, r"hydra.sweeper.plan.software='cuda': \['cuda'\] unknown"),
        ({"verify.top_k": "many"}, r"hydra.sweeper.verify.top_k='many': Value 'many'"),
        (
            {"n_trails": 3},
            r"unknown setting hydra.sweeper.n_trails \(did you mean "
            r"hydra.sweeper.n_trials\?\)",
        ),
        ({"verify": {"repeat": 3}}, r"did you mean hydra.sweeper.verify.repeats\?"),
    ],
)
def test_values_no_sweep_can_run_with_are_refused(settings, match) -> None:
    with pytest.raises(ValueError, match=match) as err:
        settings_from(settings)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"cost.planned_steps": -1}, r"hydra.sweeper.cost.planned_steps must be 0 \(derive from"),
        ({"cost.planned_steps": 2.5}, r"hydra.sweeper.cost.planned_steps=2.5: Value '2.5'"),
        ({"cost.planned_tokens": 0}, "hydra.sweeper.cost.planned_tokens must be a positive"),
        ({"cost.usd_per_hour": -2.0}, r"hydra.sweeper.cost.usd_per_hour must be >= 0 \(0 = "),
        ({"cost.prices": {"H100": -1.0}}, r"hydra.sweeper.cost.prices\['H100'\] must be a price"),
    ],
)
def test_run_length_and_price_are_checked(settings, match) -> None:
    with pytest.raises(ValueError, match=match):
        settings_from(settings)


def test_cost_defaults_plan_ten_billion_tokens_and_no_price() -> None:
    c = settings_from({}).cost
    assert (c.planned_steps, c.planned_tokens, c.usd_per_hour, c.prices) == (
        0,
        10_000_000_000,
        0.0,
        {},
    )
    assert settings_from({"cost": {"prices": {"H100": 2.5}}}).cost.prices == {"H100": 2.5}


def test_a_grouped_override_reaches_the_sweepers_typed_settings() -> None:
    """The whole path: Hydra composes conf/sweep.yaml with a preset and grouped overrides, builds
    the sweeper from hydra.sweeper, and the engine reads typed, frozen settings."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import train.core.config  # noqa: F401  (registers train_schema)
    from tests.sweep_helpers import REPO

    overrides = [
        "search=smoke",
        "hydra.sweeper.verify.repeats=2",
        "hydra.sweeper.guard.mode=off",
        "hydra.sweeper.budget.max_wall_s=60",
        "hydra.sweeper.cost.prices={H100: 2.5}",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=overrides, return_hydra_config=True)
    sweeper = instantiate(cfg.hydra.sweeper)
    s = sweeper._engine.settings
    assert (s.verify.repeats, s.verify.top_k, s.search_name) == (2, 2, "smoke")  # smoke's top_k
    assert (s.guard.mode, s.budget.max_wall_s, s.cost.prices) == ("off", 60.0, {"H100": 2.5})
    assert s.pruner.kind == "none" and s.space == {
        "batch.micro_batch": "choice(4, 8)",
        "data.num_workers": "choice(0, 1)",
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.verify.repeats = 3  # type: ignore[misc]


# ---- a search preset's own keys (sweeper/preset_file.py) ----------------------------------------


@pytest.mark.parametrize(
    ("doc", "keys"),
    [
        ({"n_trials": 2}, ["n_trials"]),
        ({"verify": {"top_k": 1, "repeats": 2}}, ["verify.top_k", "verify.repeats"]),
        ({"space": {"batch.micro_batch": "choice(4, 8)"}}, ["space"]),  # the user's own keys
        ({"defaults": [], "pruner": {}}, ["pruner"]),
    ],
)
def test_preset_keys(doc: dict, keys: list[str]) -> None:
    from sweeper.preset_file import preset_keys

    assert preset_keys(doc) == keys


def test_preset_path_prefers_a_searchpath_folder_to_conf(tmp_path: Path) -> None:
    from sweeper.preset_file import preset_path

    conf, mine = tmp_path / "conf", tmp_path / "mine"
    for folder in (conf, mine):
        (folder / "search").mkdir(parents=True)
        (folder / "search" / "quick.yaml").write_text("n_trials: 1\n")
    assert preset_path(["search=quick"], conf) == conf / "search" / "quick.yaml"
    assert preset_path(["search=quick", f"hydra.searchpath=[file://{mine}]"], conf) == (
        mine / "search" / "quick.yaml"
    )
    assert preset_path(["search=absent"], conf) is None
    assert preset_path(["n_trials=3"], conf) is None
