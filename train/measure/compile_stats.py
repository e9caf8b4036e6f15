"""What torch.compile did: compile time, frames compiled, graph breaks and whether each graph came
from the compile cache, from Dynamo's counters.

Snapshots before and after a window tell whether anything recompiled inside it; a trial that
recompiles while being measured is timing the compiler, not the model, and is flagged. The cache
counters (Inductor's FX-graph cache and AOTAutograd's cache: torch/_inductor/codecache.py and
torch/_functorch/_aot_autograd/autograd_cache.py count a hit or a miss per graph looked up) say
whether the warm-up's compile was cold or warm (`train.core.compile_graphs.cache_state`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CompileSnapshot:
    frames: int  # frames Dynamo compiled so far (each recompile adds one)
    graph_breaks: int  # graph breaks recorded so far
    compile_s: float  # wall seconds Dynamo spent compiling so far
    # graphs Inductor's FX-graph cache / AOTAutograd's cache found (hits) or compiled (misses)
    fxgraph_hits: int = 0
    fxgraph_misses: int = 0
    autograd_hits: int = 0
    autograd_misses: int = 0


def snapshot() -> CompileSnapshot:
    # Private-but-stable counters: torch._dynamo.utils.counters and calculate_time_spent() are what
    # torch's own compile-time reports read; guarded so a future rename degrades to zeros, not a
    # crash.
    try:
        from torch._dynamo.utils import calculate_time_spent, counters
    except ImportError:
        return CompileSnapshot(frames=0, graph_breaks=0, compile_s=0.0)
    inductor, aot = counters["inductor"], counters["aot_autograd"]
    frames = int(counters["frames"].get("total", 0))
    breaks = int(sum(counters["graph_break"].values()))
    try:
        spent = calculate_time_spent()
        seconds = float(spent.get("total_wall_time", spent.get("entire_frame_compile", 0.0)))
    except Exception:
        seconds = 0.0
    return CompileSnapshot(
        frames=frames,
        graph_breaks=breaks,
        compile_s=seconds,
        fxgraph_hits=int(inductor.get("fxgraph_cache_hit", 0)),
        fxgraph_misses=int(inductor.get("fxgraph_cache_miss", 0)),
        autograd_hits=int(aot.get("autograd_cache_hit", 0)),
        autograd_misses=int(aot.get("autograd_cache_miss", 0)),
    )


def delta(before: CompileSnapshot, after: CompileSnapshot) -> dict[str, float | int]:
    return {
        "frames_compiled": after.frames - before.frames,
        "graph_breaks": after.graph_breaks - before.graph_breaks,
        "compile_s": max(0.0, after.compile_s - before.compile_s),
        "fxgraph_hits": after.fxgraph_hits - before.fxgraph_hits,
        "fxgraph_misses": after.fxgraph_misses - before.fxgraph_misses,
        "autograd_hits": after.autograd_hits - before.autograd_hits,
        "autograd_misses": after.autograd_misses - before.autograd_misses,
    }
