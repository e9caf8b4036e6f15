"""The sweeper's settings, typed, validated once and frozen.

Hydra hands the sweeper its `hydra.sweeper` node. Its schema, `ThroughputSweeperConf` in
hydra_plugins/throughput_sweeper/config.py, is the one declaration of the settings and their groups
(`verify`, `guard`, `budget`, ...), each a frozen keyword-only dataclass. `settings_from` turns the
node back into those dataclasses and checks every value here, so the value the sweeper reads is the
schema's own type (`SweepSettings`): a value the sweep derives later (the CPU wall cap, a grid's
trial count) is a `dataclasses.replace`, never a mutation. The race's rules are the `verify` group
(`VerifyConf`) and the numerics guard's the `guard` group (`GuardConf`), checked with the rest so a
race that could never decide is refused before anything runs; the judge that applies them is
sweeper/verify/race_rules.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hydra_plugins.throughput_sweeper.config import (
    RENAMED,
    BudgetConf,
    CostConf,
    GuardConf,
    ThroughputSweeperConf,
    VerifyConf,
    groups,
    schema_node,
    setting_names,
)
from train.core.cost import validate_prices
from train.core.handoff.interval import check_mtbf_h
from train.core.keys import sweeper_key_error
from train.core.rules import check_compile_cache

SweepSettings = ThroughputSweeperConf  # the sweeper's name for the checked value of the schema


def settings_from(given: Mapping[str, Any] | DictConfig) -> SweepSettings:
    """Settings from Hydra's sweeper node, or a plain mapping of some settings (tests pass one,
    nested by group or with dotted names: `{"verify.top_k": 1}`); a missing setting takes the
    schema's default, an unknown one or an old flat name is refused naming the right one."""
    if isinstance(given, DictConfig):
        given = OmegaConf.to_container(given, resolve=True)
    values = _dotted({k: _plain(v) for k, v in given.items() if k != "_target_"})
    names = setting_names()
    node = schema_node()
    for name, value in values.items():
        error = sweeper_key_error(name, names, RENAMED)
        if error:
            raise ValueError(error)
        if name == "guard.mode":  # any case; YAML's true/false read as on/off
            value = str(value).strip().lower()
            value = {"true": "on", "false": "off"}.get(value, value)
        try:
            OmegaConf.update(node, name, value, merge=False)
        except OmegaConfBaseException as e:
            raise ValueError(f"hydra.sweeper.{name}={value!r}: {str(e).splitlines()[0]}") from None
    # Hydra's plugin scan executes the schema's module again in place, so its classes may be newer
    # than the ones imported here: the node's own type is the one to trust, not an isinstance
    settings = cast(SweepSettings, OmegaConf.to_object(node))
    check(settings)
    return settings


def _plain(value: Any) -> Any:
    """A value as plain Python (a DictConfig Hydra passes for a group or the space)."""
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _dotted(given: Mapping[str, Any]) -> dict[str, Any]:
    """{"verify": {"top_k": 1}} -> {"verify.top_k": 1}; the space and the prices stay one value
    (their keys are the user's, dotted trainer keys among them)."""
    out: dict[str, Any] = {}
    inner = groups()
    for key, value in given.items():
        if key in inner and isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def check(s: SweepSettings) -> None:
    """Every bound a sweep cannot run without, each refused with its dotted name and the fix. The
    sampler, pruner, objective and noise floor are checked where they are used
    (sweeper/study/optuna_study.py, sweeper/study/objective.py, sweeper/verify/winner.py)."""
    if s.n_jobs < 1:
        raise ValueError(f"hydra.sweeper.n_jobs must be at least 1, got {s.n_jobs}")
    if s.verify.top_k < 1:
        raise ValueError(f"hydra.sweeper.verify.top_k must be at least 1, got {s.verify.top_k}")
    if s.n_trials < 0:
        raise ValueError(
            f"hydra.sweeper.n_trials must be 0 (no limit) or positive, got {s.n_trials}"
        )
    _check_budget(s.budget)
    _check_cost(s.cost)
    _check_compile_cache(s.compile_cache)
    plan_software(s.plan.software)
    check_race(s.verify)  # the race's own checks (confidence, margin, rounds)
    check_guard(s.guard)  # the numerics guard's mode, steps, seeds, k and floor


def _check_budget(b: BudgetConf) -> None:
    for name in ("max_wall_s", "cpu_max_wall_s", "min_trials_for_failure_rate"):
        if getattr(b, name) < 0:
            raise ValueError(
                f"hydra.sweeper.budget.{name} must be 0 (no limit) or positive, got "
                f"{getattr(b, name)}"
            )
    if b.polish_trials < -1:
        raise ValueError(
            f"hydra.sweeper.budget.polish_trials must be -1 (automatic), 0 (off) or positive, got "
            f"{b.polish_trials}"
        )
    if not 0 <= b.max_failure_rate <= 1:
        raise ValueError(
            f"hydra.sweeper.budget.max_failure_rate must be a share in [0, 1], got "
            f"{b.max_failure_rate}"
        )


def check_race(v: VerifyConf) -> None:
    """How a race decides (sweeper/verify/race_rules.py applies it): a race that could never
    decide is refused."""
    if v.repeats < 1:
        raise ValueError(
            f"hydra.sweeper.verify.repeats={v.repeats}: a race needs at least 1 round "
            f"(a paired test needs 2; 3 is the default)"
        )
    if v.max_rounds < 0:
        raise ValueError(
            f"hydra.sweeper.verify.max_rounds must be 0 (= verify.repeats) or positive, got "
            f"{v.max_rounds}"
        )
    if v.last_round < v.repeats:
        raise ValueError(
            f"hydra.sweeper.verify.max_rounds={v.max_rounds} is below verify.repeats="
            f"{v.repeats}; raise it to at least {v.repeats}"
        )
    if not 0.5 <= v.confidence < 1:
        raise ValueError(
            f"hydra.sweeper.verify.confidence={v.confidence}: use a value in [0.5, 1), e.g. 0.95"
        )
    if not 0 <= v.margin < 0.5:
        raise ValueError(
            f"hydra.sweeper.verify.margin={v.margin}: use a share in [0, 0.5), e.g. 0.02"
        )
    if not 0 < v.within <= 1:
        raise ValueError(
            f"hydra.sweeper.verify.within={v.within}: use a share in (0, 1], e.g. 0.8 (race "
            "configs at most 20% slower than the best)"
        )


GUARD_MODES = ("auto", "on", "off")


def check_guard(g: GuardConf) -> None:
    """The numerics guard's settings: the guard itself is sweeper/verify/guard.py, its arithmetic
    sweeper/verify/guard_rules.py."""
    if g.mode not in GUARD_MODES:
        raise ValueError(f"hydra.sweeper.guard.mode={g.mode!r}: use auto, on or off")
    if isinstance(g.steps, bool) or not isinstance(g.steps, int) or g.steps < 5:
        raise ValueError(
            f"hydra.sweeper.guard.steps={g.steps!r}: use an integer >= 5 (a curve "
            f"of a few windows), e.g. 20"
        )
    if isinstance(g.seeds, bool) or not isinstance(g.seeds, int) or g.seeds < 2:
        raise ValueError(
            f"hydra.sweeper.guard.seeds={g.seeds!r}: a seed spread needs at least 2 "
            f"reference runs (2 is the default)"
        )
    if not (isinstance(g.k, int | float) and 0 < g.k < float("inf")):
        raise ValueError(
            f"hydra.sweeper.guard.k={g.k!r}: use a finite number > 0 (the tolerance "
            f"is k x the seed spread), e.g. 2"
        )
    if not (isinstance(g.floor, int | float) and 0 <= g.floor < float("inf")):
        raise ValueError(
            f"hydra.sweeper.guard.floor={g.floor!r}: use a finite number of nats >= 0, e.g. 0.01"
        )
    if isinstance(g.tokens, bool) or not isinstance(g.tokens, int) or g.tokens < 1:
        raise ValueError(
            f"hydra.sweeper.guard.tokens={g.tokens!r}: use an integer >= 1 (the most "
            f"tokens in one curve step), e.g. 65536"
        )


PLAN_SOFTWARE = ("torchao", "fa3", "fa4")


def plan_software(value: str) -> tuple[str, ...]:
    """hydra.sweeper.plan.software as a tuple of package names, checked: '' or a comma list of
    PLAN_SOFTWARE."""
    names = tuple(n.strip().lower() for n in str(value or "").split(",") if n.strip())
    unknown = [n for n in names if n not in PLAN_SOFTWARE]
    if unknown:
        raise ValueError(
            f"hydra.sweeper.plan.software={value!r}: {unknown} unknown; use a comma list of "
            f"{', '.join(PLAN_SOFTWARE)} (or '' for none), e.g. plan.software=torchao,fa3"
        )
    return names


def _check_cost(c: CostConf) -> None:
    """The run length and the price the time-to-train report uses (train/core/cost.py)."""

    def whole(value: Any, low: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= low

    if not whole(c.planned_steps, 0):
        raise ValueError(
            f"hydra.sweeper.cost.planned_steps must be 0 (derive from planned_tokens) or a "
            f"positive integer, got {c.planned_steps!r}"
        )
    if not whole(c.planned_tokens, 1):
        raise ValueError(
            f"hydra.sweeper.cost.planned_tokens must be a positive integer (tokens of the "
            f"production run, e.g. 10_000_000_000), got {c.planned_tokens!r}"
        )
    if not c.usd_per_hour >= 0:
        raise ValueError(
            f"hydra.sweeper.cost.usd_per_hour must be >= 0 (0 = unknown: hours only), got "
            f"{c.usd_per_hour!r}"
        )
    check_mtbf_h(c.mtbf_h)
    validate_prices(c.prices, field="hydra.sweeper.cost.prices")


def _check_compile_cache(value: Any) -> None:
    """hydra.sweeper.compile_cache: auto, off or a folder (sweeper/launch/cache_folder.py)."""
    field = "hydra.sweeper.compile_cache"
    if value == "auto":
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{field} must be auto (a folder beside the sweep's storage), off (compile cold in "
            f"every trial) or a folder, got {value!r}"
        )
    check_compile_cache(value, field=field)


def replace_in(settings: SweepSettings, **changes: Any) -> SweepSettings:
    """`settings` with dotted settings replaced (`replace_in(s, **{"verify.top_k": 1})`): the
    frozen value derived, each group replaced whole."""
    top: dict[str, Any] = {}
    for name, value in changes.items():
        group, _, key = name.partition(".")
        if key:
            base = top.get(group, getattr(settings, group))
            top[group] = dataclasses.replace(base, **{key: value})
        else:
            top[name] = value
    return dataclasses.replace(settings, **top)
