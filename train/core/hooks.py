"""Test hooks: faults and a data bottleneck planted on purpose, never settings of the trainer.

The tests and the benchmark scripts exercise the sweep on real processes: a trial that crashes,
returns a NaN loss, runs out of memory, hangs, is killed or writes to a full disk; a trial that
trains worse (`coarse_weights`, train/trial/coarse.py: the numerics guard must catch it); a data
source that sleeps per batch. The user's schema (train/core/config.py `Config`,
docs/reference/settings.md) has none of them. Only while THROUGHPUT_SWEEP_TEST_HOOKS=1 is set
(tests/conftest.py and the scripts set it; trial processes inherit it) does the trainer take a
`hooks` section (config.py `HookedConfig`), set like any other:

    hooks.fault=crash hooks.fault_rank=1 hooks.inject_latency_s=0.25

and a sweep may search them as knobs. Without the switch, a hook key is refused in one line before
anything starts (train/core/keys.py). The torch side plants them: train/trial/window.py and
failure.py (fault), train/data/dataset.py (inject_latency_s).

Part of the torch-free core (train/core/).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

ENV = "THROUGHPUT_SWEEP_TEST_HOOKS"  # "1" turns the hooks on
SECTION = "hooks"  # the config section that holds them
# coarse_weights is no failure but a planted precision loss (train/trial/coarse.py): the trial
# completes and trains worse, for the numerics guard to catch
FAULTS = ("none", "crash", "nan", "oom", "hang", "sigkill", "disk_full", "coarse_weights")
# each hook's key before it left the schema, named when a command still uses it
FORMER_KEYS = {
    "trial.fault": "hooks.fault",
    "trial.fault_rank": "hooks.fault_rank",
    "data.inject_latency_s": "hooks.inject_latency_s",
}


@dataclass(kw_only=True)
class HooksConfig:
    """What a test plants; the defaults plant nothing."""

    # a failure planted at a trial's first measured step: none | crash | nan | oom | hang |
    # sigkill | disk_full | coarse_weights (rounds every weight after each step)
    fault: str = "none"
    fault_rank: int = 0  # the process that plants it in a data-parallel trial (runtime.nproc > 1)
    # seconds slept per batch inside the data source: a data bottleneck that loader workers can
    # hide and the main process cannot; 0 = off
    inject_latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"hooks.fault must be one of {FAULTS}, got {self.fault!r}")
        if self.fault_rank < 0:
            raise ValueError(f"hooks.fault_rank must be a rank >= 0, got {self.fault_rank}")
        if not (math.isfinite(self.inject_latency_s) and self.inject_latency_s >= 0):
            raise ValueError(
                f"hooks.inject_latency_s must be a finite number >= 0, got "
                f"{self.inject_latency_s}; use 0 to turn the planted data bottleneck off"
            )


def enabled() -> bool:
    """Whether this process takes the hooks (THROUGHPUT_SWEEP_TEST_HOOKS=1)."""
    return os.environ.get(ENV) == "1"


def enable() -> None:
    """Turn the hooks on for this process and every process it starts. Call it before
    train.core.config is imported: the schema Hydra composes is registered then."""
    os.environ[ENV] = "1"


def hook_keys() -> set[str]:
    """The dotted keys of the hooks (`hooks.fault`, ...)."""
    return {f"{SECTION}.{f.name}" for f in dataclasses.fields(HooksConfig)}


def hooks_of(cfg: Any) -> HooksConfig:
    """A built config's hooks; nothing planted when its schema has no hooks section."""
    found = getattr(cfg, SECTION, None)
    return found if isinstance(found, HooksConfig) else HooksConfig()


def hook_key_error(key: str) -> str | None:
    """The one line refusing `key` when it names a test hook this process does not take: a hook
    without the switch, or a hook's former key; None for any other key."""
    new = FORMER_KEYS.get(key, key if key == SECTION or key in hook_keys() else None)
    if new is None:
        return None
    if enabled():
        return f"{key} is not a setting of the trainer: the test hook is {new}"
    hook = "a test hook" if new == key else f"a test hook's former key (now {new})"
    # a best.yaml exported before the hooks left the schema holds the former keys at their off
    # values (fault: none, inject_latency_s: 0.0): deleting those lines changes nothing it runs
    older = "" if new == key else " (an older best.yaml holds it switched off: delete the line)"
    return (
        f"{key} is not a setting of the trainer: it is {hook}, taken only with {ENV}=1 in the "
        f"environment (the tests and benchmark scripts set it); remove it{older}"
    )
