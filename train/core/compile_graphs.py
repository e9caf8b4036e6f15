"""Which knobs change the compiled graph, and each graph's compile measured once per sweep.

torch.compile's caches key a graph by its code, shapes and compile config
(train/core/compile_cache.py), so two configurations that differ only in how data is loaded,
where checkpoints go or how long the trial runs compile the same graph: the second finds the
first's in the cache. `graph_key` names that graph from a trainer config, leaving out the knobs
that cannot change it (NOT_GRAPH: data loading, checkpointing, the optimizer, the trial's window,
the seed, thread count, the run length and how it is split into micro-batches per step). Anything
not listed there counts as changing the graph, so a new knob is never wrongly shared.

The sweep charges a production run's compile from the graph, not from the trial's luck (a trial
that found its graph cached compiled in seconds; the same config cold takes a minute on a GPU):
`charge_compile` keeps each graph's first measured compile in the sweep's record (first_record.py,
shared by every trial of the sweep) and hands every later trial of the graph the same figure. Pure
functions and file I/O; no torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from train.core.first_record import first_wins, read_section

CACHE_STATES = ("hit", "miss", "partial", "off", "none")
# the cache counters a `delta` carries
CACHE_COUNTS = ("fxgraph_hits", "fxgraph_misses", "autograd_hits", "autograd_misses")


def cache_state(*, hits: int, misses: int, compiled: bool, enabled: bool) -> str:
    """What the cache did for a compile: hit (every graph found: a warm compile), miss (none
    found: cold), partial (some of each), off (caches disabled: cold), none (nothing compiled,
    or nothing the caches looked up)."""
    if not compiled:
        return "none"
    if not enabled:
        return "off"
    if hits and misses:
        return "partial"
    if misses:
        return "miss"
    return "hit" if hits else "none"


RECORD_NAME = "graphs.json"  # the record's file name beside a cache folder
SECTION = "graphs"  # its section of the record (train/core/first_record.py)

# Dotted trainer keys (or whole sections, ending in ".") that never change the compiled model:
# what feeds it, what saves it, the optimizer (not compiled: train/run/loop.py build_model), the
# measurement's own window, a test's planted hooks, the seed, CPU threads (a runtime setting of the
# same kernels), the cache's own folder, and the step's length in micro-batches (each micro-batch
# runs the same graph).
NOT_GRAPH: tuple[str, ...] = (
    "data.",
    "checkpoint.",
    "optim.",
    "trial.",
    "train.",
    "hooks.",
    "provenance",
    "pinned_sections",
    "model.name",
    "batch.tokens_per_step",
    "batch.grad_accum",
    "runtime.seed",
    "runtime.threads",
    "runtime.compile_cache",
    "ddp.timeout_s",
)
# Graph knobs whose default is left out of the key, so that a config from before the knob existed
# (which lacks it) names the same graph as one that sets the default: runtime.compile_unit=model is
# the whole-model graph every compiled config was before regional compilation.
KEY_DEFAULTS: dict[str, Any] = {"runtime.compile_unit": "model"}


def changes_graph(key: str) -> bool:
    """Whether the dotted trainer key `key` can change the compiled graph (NOT_GRAPH)."""
    return not any(
        key.startswith(p) if p.endswith(".") else key == p or key.startswith(p + ".")
        for p in NOT_GRAPH
    )


def flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (a flat one comes back unchanged)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def graph_knobs(config: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs of `config` (nested or dotted) that change the compiled graph, sorted (a knob at
    its KEY_DEFAULTS value left out)."""
    return {
        k: v
        for k, v in sorted(flat(config).items())
        if changes_graph(k) and not (k in KEY_DEFAULTS and v == KEY_DEFAULTS[k])
    }


def graph_key(config: Mapping[str, Any]) -> str | None:
    """A short name for the graph `config` compiles (equal knobs, equal key); None when it
    compiles nothing (runtime.compile=none)."""
    knobs = graph_knobs(config)
    if knobs.get("runtime.compile", "none") == "none":
        return None
    text = json.dumps(knobs, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def distinct_graphs(points: Iterable[Mapping[str, Any]], *, base: Mapping[str, Any]) -> int:
    """How many graphs a set of points compiles: each point (dotted overrides) over `base` (the
    trainer config the points override); eager points compile none. For a plan: a sweep with a
    shared cache pays one cold compile per graph, not one per trial."""
    flat_base = flat(base)
    keys = {graph_key({**flat_base, **flat(p)}) for p in points}
    return len(keys - {None})


@dataclass(frozen=True, kw_only=True)
class GraphCompile:
    """A graph's compile as the record holds it: what time_to_train charges for the graph."""

    compile_s: float  # the first measured compile's seconds
    cache: str  # that measurement's cache state (cache_state): miss = cold
    measured_by: str  # who measured it (a trial's job folder)
    first: bool  # this call wrote the entry (its own compile is the graph's)


def record_key(graph: str, *, device: str, torch_version: str) -> str:
    """The record's entry for a graph on a device under a torch version (a cache folder moved to
    another machine or torch compiles again, and so may cost another time)."""
    return f"{graph}|{device}|torch {torch_version}"


def read_record(path: Path) -> dict[str, dict[str, Any]]:
    """The record's graphs ({} when there is none, or it is unreadable: it only saves work)."""
    return read_section(path, SECTION)


def charge_compile(
    path: Path, *, entry: str, compile_s: float, cache: str, measured_by: str
) -> GraphCompile:
    """The graph's compile charge from the record at `path`: the first trial to report a graph
    writes its own compile there; every later one gets that entry back, whatever it saw."""
    got, first = first_wins(
        Path(path),
        section=SECTION,
        key=entry,
        value={"compile_s": compile_s, "cache": cache, "measured_by": measured_by},
    )
    return GraphCompile(
        compile_s=float(got["compile_s"]),
        cache=str(got["cache"]),
        measured_by=str(got["measured_by"]),
        first=first,
    )
