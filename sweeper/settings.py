"""The sweeper's settings, typed, validated once and frozen.

Hydra hands the sweeper its `hydra.sweeper` node. Its schema, `ThroughputSweeperConf` in
hydra_plugins/throughput_sweeper/config.py, is the one declaration of the fields (what each means,
its default); `SweepSettings` subclasses it, so it re-declares none. `SweepSettings.from_config`
turns the node into a checked, frozen, keyword-only dataclass: a value the sweep derives later (the
CPU wall cap, a grid's trial count) is a `dataclasses.replace`, never a mutation.
The race's rules (`RaceRules`, from the verify_* fields) are checked here with the rest, so a race
that could never decide is refused before anything runs; the judge that applies them is
sweeper/verify/race_rules.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hydra_plugins.throughput_sweeper.config import ThroughputSweeperConf
from train.core.cost import validate_prices
from train.core.rules import check_compile_cache


@dataclass(frozen=True, kw_only=True)
class RaceRules:
    """How a race decides (sweeper/verify/race_rules.py applies them). Validated here: a race
    that could never decide is refused."""

    min_rounds: int = 3  # rounds every contender runs before any is dropped
    max_rounds: int = 10  # the race stops here at the latest
    confidence: float = 0.95  # of each paired test
    margin: float = 0.02  # survivors within +-margin of the leader are equivalent

    def __post_init__(self) -> None:
        if self.min_rounds < 1:
            raise ValueError(
                f"hydra.sweeper.verify_repeats={self.min_rounds}: a race needs at least 1 round "
                f"(a paired test needs 2; 3 is the default)"
            )
        if self.max_rounds < self.min_rounds:
            raise ValueError(
                f"hydra.sweeper.verify_max_rounds={self.max_rounds} is below verify_repeats="
                f"{self.min_rounds}; raise it to at least {self.min_rounds}"
            )
        if not 0.5 <= self.confidence < 1:
            raise ValueError(
                f"hydra.sweeper.verify_confidence={self.confidence}: use a value in [0.5, 1), "
                f"e.g. 0.95"
            )
        if not 0 <= self.margin < 0.5:
            raise ValueError(
                f"hydra.sweeper.verify_margin={self.margin}: use a share in [0, 0.5), e.g. 0.02"
            )


GUARD_MODES = ("auto", "on", "off")


@dataclass(frozen=True, kw_only=True)
class GuardRules:
    """The numerics guard's settings (hydra.sweeper.numerics_guard*), checked: the guard itself is
    sweeper/verify/guard.py, its arithmetic sweeper/verify/guard_rules.py."""

    mode: str = "auto"  # auto (on where the space searches a math-changing key) | on | off
    steps: int = 20
    seeds: int = 2
    k: float = 2.0
    floor: float = 0.01
    max_tokens: int = 65536  # the most tokens in one curve step (train.core.curve.capped_split)

    def __post_init__(self) -> None:
        if self.mode not in GUARD_MODES:
            raise ValueError(f"hydra.sweeper.numerics_guard={self.mode!r}: use auto, on or off")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 5:
            raise ValueError(f"hydra.sweeper.numerics_guard_steps={self.steps!r}: use an integer "
                             f">= 5 (a curve of a few windows), e.g. 20")  # fmt: skip
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 2:
            raise ValueError(f"hydra.sweeper.numerics_guard_seeds={self.seeds!r}: a seed spread "
                             f"needs at least 2 reference runs (2 is the default)")  # fmt: skip
        if not (isinstance(self.k, int | float) and 0 < self.k < float("inf")):
            raise ValueError(f"hydra.sweeper.numerics_guard_k={self.k!r}: use a finite number > 0 "
                             f"(the tolerance is k x the seed spread), e.g. 2")  # fmt: skip
        if not (isinstance(self.floor, int | float) and 0 <= self.floor < float("inf")):
            raise ValueError(f"hydra.sweeper.numerics_guard_floor={self.floor!r}: use a finite "
                             f"number of nats >= 0, e.g. 0.01")  # fmt: skip
        tokens = self.max_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"hydra.sweeper.numerics_guard_tokens={tokens!r}: use an integer "
                             f">= 1 (the most tokens in one curve step), e.g. 65536")  # fmt: skip


def guard_rules_from(settings: ThroughputSweeperConf) -> GuardRules:
    """The guard's settings, checked; numerics_guard true/false read as on/off."""
    mode = str(settings.numerics_guard).strip().lower()
    mode = {"true": "on", "false": "off"}.get(mode, mode)
    return GuardRules(mode=mode, steps=settings.numerics_guard_steps,
                      seeds=settings.numerics_guard_seeds, k=settings.numerics_guard_k,
                      floor=settings.numerics_guard_floor,
                      max_tokens=settings.numerics_guard_tokens)  # fmt: skip


PLAN_SOFTWARE = ("torchao", "fa3", "fa4")


def plan_software(value: str) -> tuple[str, ...]:
    """hydra.sweeper.plan_software as a tuple of package names, checked: '' or a comma list of
    PLAN_SOFTWARE."""
    names = tuple(n.strip().lower() for n in str(value or "").split(",") if n.strip())
    unknown = [n for n in names if n not in PLAN_SOFTWARE]
    if unknown:
        raise ValueError(
            f"hydra.sweeper.plan_software={value!r}: {unknown} unknown; use a comma list of "
            f"{', '.join(PLAN_SOFTWARE)} (or '' for none), e.g. plan_software=torchao,fa3"
        )
    return names


def rules_from(settings: ThroughputSweeperConf) -> RaceRules:
    """The race's rules from the sweep settings (hydra.sweeper.verify_*), checked."""
    return RaceRules(
        min_rounds=settings.verify_repeats,
        max_rounds=settings.verify_max_rounds or settings.verify_repeats,
        confidence=settings.verify_confidence,
        margin=settings.verify_margin,
    )


# A dataclass again only for an __init__ that calls __post_init__ (the schema has none); no field is
# added here: a new setting is declared in ThroughputSweeperConf alone.
@dataclass(kw_only=True)
class SweepSettings(ThroughputSweeperConf):
    """`hydra.sweeper.*`, checked once and frozen. The fields, what each one means and its default
    are ThroughputSweeperConf's; this class adds the checks, `from_config` and the derived `polish`
    count. An assignment raises `dataclasses.FrozenInstanceError`; derive with `replace`."""

    def __post_init__(self) -> None:
        # Bounds a sweep cannot run without; the sampler, pruner, objective and noise floor are
        # checked where they are used (sweeper/study/study.py, sweeper/study/objective.py,
        # sweeper/verify/winner.py).
        for name in ("n_jobs", "verify_top_k", "verify_repeats"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"hydra.sweeper.{name} must be at least 1, got {getattr(self, name)}"
                )
        for name in ("n_trials", "max_wall_s", "cpu_max_wall_s", "min_trials_for_failure_rate"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"hydra.sweeper.{name} must be 0 (no limit) or positive, got "
                    f"{getattr(self, name)}"
                )
        _check_cost(self)
        _check_compile_cache(self.compile_cache)
        plan_software(self.plan_software)
        if self.polish_trials < -1:
            raise ValueError(
                f"hydra.sweeper.polish_trials must be -1 (automatic), 0 (off) or positive, got "
                f"{self.polish_trials}"
            )
        if self.verify_max_rounds < 0:
            raise ValueError(
                f"hydra.sweeper.verify_max_rounds must be 0 (= verify_repeats) or positive, got "
                f"{self.verify_max_rounds}"
            )
        rules_from(self)  # the race's own checks (confidence, margin, rounds), before anything runs
        guard_rules_from(self)  # the numerics guard's mode, steps, seeds, k and floor
        if not 0 <= self.max_failure_rate <= 1:
            raise ValueError(
                f"hydra.sweeper.max_failure_rate must be a share in [0, 1], got "
                f"{self.max_failure_rate}"
            )
        object.__setattr__(self, "_checked", True)  # frozen from here on

    def __setattr__(self, name: str, value: Any) -> None:
        # frozen=True is not available: a frozen dataclass may not subclass Hydra's mutable schema
        if getattr(self, "_checked", False):
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    @classmethod
    def from_config(cls, settings: Mapping[str, Any] | DictConfig) -> SweepSettings:
        """Settings from Hydra's sweeper node (or a plain mapping of some fields, as tests pass);
        a missing field takes the schema's default, an unknown one is refused."""
        if isinstance(settings, DictConfig):
            settings = OmegaConf.to_container(settings, resolve=True)
        given = {k: v for k, v in settings.items() if k != "_target_"}
        names = {f.name for f in dataclasses.fields(cls)} - {"_target_"}
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(
                f"unknown hydra.sweeper setting(s) {unknown}; the fields are {sorted(names)}"
            )
        if "space" in given:
            space = given["space"]
            if isinstance(space, DictConfig):
                space = OmegaConf.to_container(space)
            given["space"] = dict(space or {})
        if "prices" in given:
            given["prices"] = dict(given["prices"] or {})
        return cls(**given)

    @property
    def polish(self) -> int:
        """Trials given to the polish step: polish_trials, or with -1 a quarter of n_trials
        (none for the grid sampler, which measures every point anyway, or without n_trials)."""
        if self.polish_trials >= 0:
            return self.polish_trials
        return self.n_trials // 4 if self.sampler != "grid" else 0


def _check_cost(s: SweepSettings) -> None:
    """The run length and the price the time-to-train report uses (train/core/cost.py)."""

    def whole(value: Any, low: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= low

    if not whole(s.planned_steps, 0):
        raise ValueError(
            f"hydra.sweeper.planned_steps must be 0 (derive from planned_tokens) or a positive "
            f"integer, got {s.planned_steps!r}"
        )
    if not whole(s.planned_tokens, 1):
        raise ValueError(
            f"hydra.sweeper.planned_tokens must be a positive integer (tokens of the production "
            f"run, e.g. 10_000_000_000), got {s.planned_tokens!r}"
        )
    if not s.usd_per_hour >= 0:
        raise ValueError(
            f"hydra.sweeper.usd_per_hour must be >= 0 (0 = unknown: hours only), got "
            f"{s.usd_per_hour!r}"
        )
    if isinstance(s.mtbf_h, bool) or not isinstance(s.mtbf_h, int | float) or not s.mtbf_h > 0:
        raise ValueError(
            f"hydra.sweeper.mtbf_h must be > 0 hours (mean time between failures of one device; "
            f"default 50000 from Llama 3's 419 interruptions in 54 days on 16,384 GPUs), got "
            f"{s.mtbf_h!r}"
        )
    validate_prices(s.prices, field="hydra.sweeper.prices")


def _check_compile_cache(value: Any) -> None:
    """hydra.sweeper.compile_cache: auto, off or a folder (sweeper/launch/compile_cache.py)."""
    field = "hydra.sweeper.compile_cache"
    if value == "auto":
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{field} must be auto (a folder beside the sweep's storage), off (compile cold in "
            f"every trial) or a folder, got {value!r}"
        )
    check_compile_cache(value, field=field)
