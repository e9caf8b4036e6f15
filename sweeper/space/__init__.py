"""The rule book for one point of a search space. Pure and torch-free; it imports nothing else
from the sweeper, so every other room may read it.

- `search_space`: the search space parsed from YAML (`SearchSpace`, `parse_space`,
  `baseline_params`).
- `point`: one point of a space as a typed value: its knobs, fit and forecast (`Point`).
- `params`: one key of a space, parsed from Hydra's override grammar (`Param`).
- `overrides`: values written as Hydra overrides that read back as written.
- `constraints`: which points are safe to run (`SpaceContext`, `check_point`).
- `memory`: the memory rules: earlier out-of-memory trials and the memory model (`MemoryFit`).
- `limits`: how long one trial may run (`TrialLimits`, `trial_limits`, `point_limits`).
"""

__all__ = [
    "constraints",
    "limits",
    "memory",
    "overrides",
    "params",
    "point",
    "search_space",
]
