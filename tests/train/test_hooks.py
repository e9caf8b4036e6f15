"""The test hooks (train/core/hooks.py) are no settings of the trainer: the user's schema, its YAML
and the settings reference have none of them; without THROUGHPUT_SWEEP_TEST_HOOKS=1 a hook key is
refused in one line naming it, and with it (tests/conftest.py turns it on for the suite) the
trainer takes it."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from tests.conftest import PROJECT_DIR, compose_config
from train.core import hooks, keys
from train.core.config import Config, HookedConfig, trainer_schema
from train.core.config_file import (
    SECTIONS,
    accepted_sections,
    check_trusted_keys,
    read_pinned_config,
)
from train.core.hooks import FORMER_KEYS, HooksConfig, hook_keys, hooks_of

HOOK_NAMES = {hooks.SECTION, *(f.name for f in dataclasses.fields(HooksConfig))}
# every hook key, old and new, as a command line sets it
HOOK_OVERRIDES = [
    "hooks.fault=crash",
    "hooks.fault_rank=1",
    "hooks.inject_latency_s=0.1",
    "trial.fault=crash",
    "trial.fault_rank=1",
    "data.inject_latency_s=0.1",
]


@pytest.fixture
def switch_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hooks.ENV, raising=False)


def _field_names(cls: type) -> set[str]:
    """Every field name of a dataclass and of the dataclasses it holds."""
    names = set()
    for f in dataclasses.fields(cls):
        names.add(f.name)
        factory = f.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            names |= _field_names(factory)
    return names


def test_the_users_schema_has_no_hook() -> None:
    assert _field_names(Config) & HOOK_NAMES == set()
    assert keys.schema_keys().isdisjoint(hook_keys() | set(FORMER_KEYS))
    reference = (PROJECT_DIR / "docs" / "reference" / "settings.md").read_text()
    assert [k for k in (*hook_keys(), *FORMER_KEYS) if f"`{k}`" in reference] == []
    hook_word = re.compile(r"\b(hooks|fault|fault_rank|inject_latency_s)\b")
    for path in (PROJECT_DIR / "conf").rglob("*.yaml"):
        assert not hook_word.search(path.read_text()), path


def test_the_switch_picks_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hooks.ENV, raising=False)
    assert trainer_schema() is Config and accepted_sections() == SECTIONS
    assert keys.accepted_keys() == keys.schema_keys()
    monkeypatch.setenv(hooks.ENV, "1")
    assert trainer_schema() is HookedConfig and accepted_sections() == (*SECTIONS, "hooks")
    assert keys.accepted_keys() == keys.schema_keys() | hook_keys()


@pytest.mark.parametrize("override", HOOK_OVERRIDES)
@pytest.mark.usefixtures("switch_off")
def test_without_the_switch_a_hook_is_refused_naming_it(override: str) -> None:
    key = override.split("=", 1)[0]
    said = rf"^{re.escape(key)} is not a setting of the trainer: it is a test hook"
    with pytest.raises(ValueError, match=said) as refused:
        keys.check_command_line([override])
    assert "THROUGHPUT_SWEEP_TEST_HOOKS=1" in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=said):  # a `+key=` Hydra added, checked after composing
        keys.check_trainer_keys([key])


@pytest.mark.usefixtures("switch_off")
def test_without_the_switch_a_former_key_names_the_new_one() -> None:
    with pytest.raises(ValueError, match=r"former key \(now hooks\.fault\)"):
        keys.check_command_line(["trial.fault=crash"])


@pytest.mark.usefixtures("switch_off")
def test_without_the_switch_a_file_with_hooks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^config file x: hooks is not a setting of the trainer"):
        check_trusted_keys({"model": {}, "hooks": {"fault": "crash"}}, what="config file x")


@pytest.mark.usefixtures("switch_off")
def test_an_older_export_with_the_former_keys_is_refused_naming_one() -> None:
    """A best.yaml exported before the hooks left the schema holds them at their off values; it
    is refused in one line, as a key renamed since is (docs/gpu holds a real one)."""
    best = PROJECT_DIR / "docs" / "gpu" / "2026-11-26-h200" / "best.yaml"
    said = r": data\.inject_latency_s is not a setting of the trainer: it is a test hook's former"
    with pytest.raises(ValueError, match=said):
        read_pinned_config(best)


def test_with_the_switch_the_hooks_are_taken() -> None:
    assert hooks.enabled()  # tests/conftest.py
    keys.check_command_line(["hooks.fault=crash", "hooks.fault_rank=1", "hooks.inject_latency_s=1"])
    keys.check_trainer_keys(sorted(hook_keys()))
    check_trusted_keys({"model": {}, "hooks": {"fault": "crash"}}, what="config file x")
    # the old names are not aliases: refused naming the new one
    with pytest.raises(ValueError, match=r"^trial\.fault is not a setting .*: the test hook is "):
        keys.check_command_line(["trial.fault=crash"])
    cfg = compose_config(["hooks.fault=nan", "hooks.fault_rank=1", "hooks.inject_latency_s=0.05"])
    assert isinstance(cfg, HookedConfig)
    assert hooks_of(cfg) == HooksConfig(fault="nan", fault_rank=1, inject_latency_s=0.05)
    assert hooks_of(compose_config()) == HooksConfig()  # nothing planted by default


def test_a_users_config_plants_nothing() -> None:
    assert hooks_of(Config()) == HooksConfig(fault="none", fault_rank=0, inject_latency_s=0.0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"fault": "bogus"}, r"hooks\.fault must be one of \('none', 'crash'"),
        ({"fault_rank": -1}, r"hooks\.fault_rank must be a rank >= 0, got -1"),
        ({"inject_latency_s": -0.1}, r"hooks\.inject_latency_s must be a finite number >= 0"),
        ({"inject_latency_s": math.nan}, r"hooks\.inject_latency_s .* got nan"),
    ],
)
def test_hooks_config_rejects(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HooksConfig(**kw)
