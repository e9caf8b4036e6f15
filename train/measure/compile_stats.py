"""What torch.compile did: compile time, frames compiled and graph breaks, from Dynamo's counters.

Snapshots before and after a window tell whether anything recompiled inside it; a trial that
recompiles while being measured is timing the compiler, not the model, and is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CompileSnapshot:
    frames: int  # frames Dynamo compiled so far (each recompile adds one)
    graph_breaks: int  # graph breaks recorded so far
    compile_s: float  # wall seconds Dynamo spent compiling so far


def snapshot() -> CompileSnapshot:
    # Private-but-stable counters: torch._dynamo.utils.counters and calculate_time_spent() are what
    # torch's own compile-time reports read; guarded so a future rename degrades to zeros, not a
    # crash.
    try:
        from torch._dynamo.utils import calculate_time_spent, counters
    except ImportError:
        return CompileSnapshot(frames=0, graph_breaks=0, compile_s=0.0)
    frames = int(counters["frames"].get("total", 0))
    breaks = int(sum(counters["graph_break"].values()))
    try:
        spent = calculate_time_spent()
        seconds = float(spent.get("total_wall_time", spent.get("entire_frame_compile", 0.0)))
    except Exception:
        seconds = 0.0
    return CompileSnapshot(frames=frames, graph_breaks=breaks, compile_s=seconds)


def delta(before: CompileSnapshot, after: CompileSnapshot) -> dict[str, float | int]:
    return {
        "frames_compiled": after.frames - before.frames,
        "graph_breaks": after.graph_breaks - before.graph_breaks,
        "compile_s": max(0.0, after.compile_s - before.compile_s),
    }
