"""How the sweeper writes a number for a person: one percent and one duration, so the progress
lines, the plan, the verdict and the final table say 3.4% and 2m05s the same way.

Pure; imports nothing from the sweeper, so every room may print through it.
"""

from __future__ import annotations

import math


def fmt_pct(x: float | None) -> str:
    """A share as a percent with one decimal (0.034 -> "3.4%"); "-" when there is none."""
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_duration(seconds: float | None) -> str:
    """Whole seconds as 45s, 2m05s or 1h03m; "?" when unknown or not finite."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def fmt_secs(s: float | None) -> str:
    """A predicted time: 3 significant digits under a minute (0.412 s), fmt_duration above; "-"
    when there is none."""
    if s is None:
        return "-"
    return f"{s:.3g} s" if s < 60 else fmt_duration(s)
