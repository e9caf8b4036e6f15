"""A trial's compile charge: the graph's first measured compile from the sweep's record, so every
trial of one graph is charged alike (train/core/compile_graphs.py), written into the result.
"""

from __future__ import annotations

import logging
from pathlib import Path

from train.core.compile_graphs import charge_compile, record_key
from train.core.result import TrialResult

log = logging.getLogger(__name__)


def add_compile_charge(result: TrialResult, *, record: str, measured_by: str) -> None:
    """Fill `result["compile"]["cache"]`'s graph_compile_* from the record at `record` (its own
    compile_s when there is no record, or the record cannot be written). A no-op for an eager
    trial or a result without the cache entry."""
    cache = (result.get("compile") or {}).get("cache")
    if not cache or cache.get("graph") is None or result.get("compile_s") is None:
        return
    own = float(result["compile_s"] or 0.0)
    charged, state, by = own, cache["state"], measured_by
    if record:
        device = (result.get("device") or {}).get("name") or "unknown device"
        torch_version = str((result.get("fingerprint") or {}).get("torch") or "?")
        try:
            got = charge_compile(
                Path(record),
                entry=record_key(cache["graph"], device=device, torch_version=torch_version),
                compile_s=own,
                cache=state,
                measured_by=measured_by,
            )
            charged, state, by = got.compile_s, got.cache, got.measured_by
        except OSError as exc:  # the charge falls back to this trial's own compile
            log.warning(
                "compile record %s not usable (%s): charging this trial's compile", record, exc
            )
    cache["graph_compile_s"] = charged
    cache["graph_compile_cache"] = state
    cache["graph_compile_by"] = by
