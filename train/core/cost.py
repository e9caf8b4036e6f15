"""Price and time-to-train: how long the planned tokens take at a measured step time, and what a
billion tokens costs at an hourly device price.

Pure arithmetic, no torch, no I/O. One function (`train_time`) prices a run: the sweep's
time_to_train objective (sweeper/study/objective.py), the sweep's cost report
(sweeper/report/time_to_train.py) and `python -m train.explain` all call it, so the three never
disagree:

    total_s = compile_s + planned_steps * step_s + (planned_steps // save_every) * save_stall_s

with planned_steps = ceil(planned_tokens / tokens_per_step) when only tokens are planned (a run
trains whole optimizer steps). Prices are never defaulted: a price is the user's
(`usd_per_hour`, or a `prices` table by device name), otherwise only hours are shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_BILLION = 1_000_000_000
# The seed's planned run: GPT-2 XL trained on 10B tokens.
DEFAULT_PLANNED_TOKENS = 10_000_000_000


@dataclass(frozen=True, kw_only=True)
class TrainTime:
    """A planned run's wall time, split into its parts (seconds)."""

    planned_steps: int  # optimizer steps of the run
    steps_s: float  # planned_steps x the steady step time
    compile_s: float  # compile and warm-up, paid once
    checkpoint_s: float  # every save's stall at the planned interval
    num_saves: int  # saves the run makes (planned_steps // save_every; 0 with no saves)

    @property
    def total_s(self) -> float:
        return self.compile_s + self.steps_s + self.checkpoint_s

    @property
    def total_h(self) -> float:
        return self.total_s / SECONDS_PER_HOUR


def planned_steps_for(*, planned_tokens: int, tokens_per_step: int) -> int:
    """Optimizer steps that train at least `planned_tokens` (whole steps: rounded up)."""
    _positive_int("planned_tokens", planned_tokens)
    _positive_int("tokens_per_step", tokens_per_step)
    return -(-planned_tokens // tokens_per_step)


def resolve_planned_steps(*, planned_steps: int, planned_tokens: int, tokens_per_step: int) -> int:
    """The run length in steps: an explicit `planned_steps` (> 0) wins; 0 derives it from
    `planned_tokens` and the config's tokens per step (the one source of truth by default)."""
    if not isinstance(planned_steps, int) or isinstance(planned_steps, bool) or planned_steps < 0:
        raise ValueError(
            f"planned_steps must be 0 (derive from planned_tokens) or a positive integer, got "
            f"{planned_steps!r}"
        )
    if planned_steps > 0:
        return planned_steps
    return planned_steps_for(planned_tokens=planned_tokens, tokens_per_step=tokens_per_step)


def train_time(
    *,
    planned_steps: int,
    step_s: float,
    compile_s: float = 0.0,
    save_every: int = 0,
    save_stall_s: float = 0.0,
) -> TrainTime:
    """Wall time of a run of `planned_steps` steady steps of `step_s`, plus `compile_s` once and
    one `save_stall_s` per checkpoint every `save_every` steps (0 = no saves)."""
    _positive_int("planned_steps", planned_steps)
    times = (("step_s", step_s), ("compile_s", compile_s), ("save_stall_s", save_stall_s))
    for name, value in times:
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    if not isinstance(save_every, int) or save_every < 0:
        raise ValueError(
            f"save_every must be 0 (no saves) or a positive integer, got {save_every!r}"
        )
    num_saves = planned_steps // save_every if save_every else 0
    return TrainTime(
        planned_steps=planned_steps,
        steps_s=planned_steps * step_s,
        compile_s=float(compile_s),
        checkpoint_s=num_saves * save_stall_s,
        num_saves=num_saves,
    )


def usd_per_1b_tokens(*, total_s: float, planned_tokens: int, usd_per_hour: float) -> float:
    """Dollars per billion tokens of a run that trains `planned_tokens` in `total_s` seconds
    (compile and checkpoint stalls included) on a device rented at `usd_per_hour`."""
    _positive_int("planned_tokens", planned_tokens)
    if not total_s > 0:
        raise ValueError(f"total_s must be > 0 seconds, got {total_s!r}")
    if not usd_per_hour > 0:
        raise ValueError(f"usd_per_hour must be > 0, got {usd_per_hour!r}")
    usd = usd_per_hour * total_s / SECONDS_PER_HOUR
    return usd * TOKENS_PER_BILLION / planned_tokens


def device_price(
    device_name: str, *, usd_per_hour: float = 0.0, prices: Mapping[str, float] | None = None
) -> float | None:
    """USD per hour for a device, or None when unknown (then only hours are shown).

    `usd_per_hour` > 0 wins. Otherwise `prices` (the user's table, device name -> USD/h) is
    matched case-insensitively: the exact name, else the longest key that occurs in the name
    (key "H100" prices "NVIDIA H100 80GB HBM3"). No price is ever assumed.
    """
    if usd_per_hour < 0:
        raise ValueError(f"usd_per_hour must be >= 0 (0 = unknown), got {usd_per_hour!r}")
    if usd_per_hour > 0:
        return float(usd_per_hour)
    name = (device_name or "").lower()
    table = {str(k).lower(): float(v) for k, v in (prices or {}).items()}
    if not name or not table:
        return None
    if name in table:
        return table[name]
    matches = [k for k in table if k and k in name]
    return table[max(matches, key=len)] if matches else None


def validate_prices(prices: Mapping[str, float], *, field: str = "prices") -> None:
    """Refuse a price table with a non-positive or non-numeric entry, naming it."""
    for key, value in prices.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(
                f"{field}[{key!r}] must be a price in USD per hour > 0, got {value!r}; "
                f"remove the entry or give the device's hourly price"
            )


def _positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
