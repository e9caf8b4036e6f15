"""The search: ask the study for points, launch them as trials, tell the study how they ended.

- `loop`: the search loop (`Search`).
- `design`: TPE's first points as a Latin-hypercube design.
- `polish`: the last trials: the incumbent's unmeasured one-knob neighbours.
"""

__all__ = ["design", "loop", "polish"]
