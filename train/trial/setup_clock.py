"""Where a trial process's set-up goes, phase by phase, from the moment the process began.

A trial forked from the zygote (train/proc/zygote.py) starts with torch imported; an exec'd one
pays the imports itself: `before_trial_s` (process start to the trial's first line) shows which.
The phases after it are the trial's own (`phase`): the session's parts (train/run/loop.py
build_session: the device with its CUDA context, threads and process group; the combination
checks; the model built, initialised and wrapped, with its optimizer; the attention probe; the
data loader and checkpointer), the environment fingerprint, the device's peaks and matmul
ceiling. The first step's compile and the
warm-up are measured apart (result `compile_s`, `warmup_s`). Torch-free.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def process_age_s(
    stat: Path = Path("/proc/self/stat"), uptime: Path = Path("/proc/uptime")
) -> float | None:
    """Seconds since this process began (its fork or exec); None off Linux. Field 22 of
    /proc/self/stat is the start in clock ticks since boot, /proc/uptime the seconds since boot:
    both count from the boot, so no whole-second boot time (btime) rounds the difference."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 overall: the two before the ')' split off
        since_boot = float(uptime.read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return max(0.0, since_boot - ticks / os.sysconf("SC_CLK_TCK"))


class SetupClock:
    """Seconds per set-up phase of one trial process (`record` for its result)."""

    def __init__(self, *, age_s: float | None = None) -> None:
        self.before_trial_s = age_s if age_s is not None else process_age_s()
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase `name`, added to an earlier phase of that name (a phase that
        raises keeps the seconds it ran)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - began

    def record(self) -> dict[str, float | None]:
        """{"before_trial_s", "<phase>_s"..., "total_s"}: the set-up before the first step."""
        out: dict[str, float | None] = {"before_trial_s": self.before_trial_s}
        out.update({f"{name}_s": s for name, s in self.phases.items()})
        out["total_s"] = (self.before_trial_s or 0.0) + sum(self.phases.values())
        return out


def setup_line(record: dict[str, float | None]) -> str:
    """'2.4 s: before_trial 1.1, device 0.1, model 0.6, ...' (seconds, in the order spent)."""
    parts = [
        f"{k.removesuffix('_s')} {v:.2f}"
        for k, v in record.items()
        if k != "total_s" and v is not None
    ]
    return f"{record['total_s']:.2f} s: {', '.join(parts)}"
