"""The trial result built from a trial's raw measurements: `build_result` turns a `Measurement`
(what train/trial/window.py measured) into the `TrialResult` train/core/result.py defines, or into a
failed one with every key present.

Part of the torch-free core (train/core/): the writer's inputs (the session, the device peaks) are
read by attribute only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from train.core.compile_graphs import CACHE_COUNTS, cache_state, graph_key
from train.core.flops import mfu, mfu_basis
from train.core.meters import summarize, time_fractions
from train.core.result import (
    SCHEMA_VERSION,
    CompileCache,
    CompileStats,
    DeviceInfo,
    Failure,
    Interval,
    Memory,
    Mfu,
    Projection,
    StepTimes,
    TimeFractions,
    TrialResult,
)

if TYPE_CHECKING:
    from pathlib import Path

    from train.core.config import Config


class CompileDelta(TypedDict):
    """What torch.compile did between two snapshots (train/measure/compile_stats.py delta)."""

    frames_compiled: int
    graph_breaks: int
    compile_s: float
    fxgraph_hits: NotRequired[int]  # the compile cache's lookups (compile_stats.delta)
    fxgraph_misses: NotRequired[int]
    autograd_hits: NotRequired[int]
    autograd_misses: NotRequired[int]


class Measurement(TypedDict):
    """The raw measurements of a trial (train/trial/measurement.py measure), `build_result`'s
    input; not written as they are."""

    step_times: list[float]  # full optimizer steps: measured, or projected from short ones
    phases: list[dict[str, float]]  # each step's phase times
    checkpoint_s: list[float]
    intervals: list[Interval]
    warmup_s: float
    warmup_compile: CompileDelta
    window_compile: CompileDelta
    loss_first: float
    loss_last: float
    losses: list[float]  # every step's mean loss, warm-up first
    lrs: list[float]  # the lr of each of those steps
    pruned: bool
    device_samples: dict[str, Any] | None
    checkpoint_bytes: int | None
    projection: Projection | None
    full_step_estimate_s: float


def empty_memory() -> Memory:
    """The `memory` entry before anything is known (train/measure/memory_meter.py fills it)."""
    return {"predicted_gib": None, "measured_gib": None, "measured_by": None}


def _config_dict(cfg: Config | None) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(cfg) if cfg is not None else {}


def build_result(
    *,
    cfg: Config | None,
    session,
    raw: Measurement | None,
    fingerprint: dict,
    wall_s: float,
    failure: Failure | None = None,
    device_name: str | None = None,
    peak=None,
    ceiling=None,
    memory=None,
    memory_report: dict[str, Any] | None = None,
    trace: Path | None = None,
    resolved_config: dict | None = None,
) -> TrialResult:
    """The result of a trial from its raw measurements, or a failed one when `raw` or `session`
    is None. `session` is the run's `train.run.loop.Session`; `peak`, `ceiling` and `memory` are
    the device's spec peak, measured ceiling and allocator reading (each None when unknown)."""
    result = _unmeasured_result(
        failure=failure,
        memory_report=memory_report,
        fingerprint=fingerprint,
        wall_s=wall_s,
        config=resolved_config if resolved_config is not None else _config_dict(cfg),
    )
    if raw is None or session is None or cfg is None:
        return result

    steps = raw["step_times"]
    tokens_per_s = session.tokens_per_step * len(steps) / sum(steps)
    world = session.rank.world  # MFU: the global rate against every process's device
    rt = cfg.runtime
    result.update(
        status="pruned" if raw["pruned"] else "complete",
        tokens_per_s=tokens_per_s,
        tokens_per_step=session.tokens_per_step,
        world_size=world,
        step_time_s=cast(StepTimes, summarize(steps)),
        warmup_s=raw["warmup_s"],
        compile_s=raw["warmup_compile"]["compile_s"],
        compile=_compile_stats(
            cfg.runtime.compile,
            raw,
            cache_setting=rt.compile_cache,
            graph=graph_key(result["config"]),
        ),
        time_frac=_time_fractions(raw, world=world),
        checkpoint_s=raw["checkpoint_s"],
        checkpoint_bytes=raw["checkpoint_bytes"] if raw["checkpoint_s"] else None,
        flops_per_token=session.flops_per_token,
        mfu=_mfu(
            tokens_per_s,
            session.flops_per_token,
            peak=peak,
            ceiling=ceiling,
            world=world,
            basis=mfu_basis(dtype=session.dtype, float8=_float8_ran(session)),
        ),
        peak_memory_gib=memory.gib if memory else None,
        memory_kind=memory.kind if memory else None,
        loss={
            "first": raw["loss_first"],
            "last": raw["loss_last"],
            "steps": raw["losses"],
            "lr": raw["lrs"],
        },
        device=_device_info(session, device_name, peak=peak, ceiling=ceiling),
        attention_backend=session.attention_backend,
        float8=getattr(session, "float8", None),
        fused_optimizer=session.fused_optimizer,
        device_samples=raw["device_samples"],
        intervals=raw["intervals"],
        trace=str(trace) if trace else None,
        projection=raw["projection"],
        full_step_estimate_s=raw["full_step_estimate_s"],
    )
    return result


def _unmeasured_result(
    *,
    failure: Failure | None,
    memory_report: dict[str, Any] | None,
    fingerprint: dict,
    wall_s: float,
    config: dict[str, Any],
) -> TrialResult:
    """Every key, in the order written, with nothing measured: a failed result as it stands."""
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "failed",
        "failure": Failure(kind=failure["kind"], message=failure["message"]) if failure else None,
        "tokens_per_s": None,
        "tokens_per_step": None,
        "world_size": None,
        "step_time_s": None,
        "warmup_s": None,
        "compile_s": None,
        "compile": None,
        "time_frac": None,
        "checkpoint_s": [],
        "checkpoint_bytes": None,
        "checkpoint_save": None,
        "flops_per_token": None,
        "mfu": {"spec": None, "ceiling": None, "basis": None},
        "peak_memory_gib": None,
        "memory_kind": None,
        "memory": cast(Memory, {**empty_memory(), **(memory_report or {})}),
        "loss": {"first": None, "last": None},
        "device": None,
        "attention_backend": None,
        "float8": None,
        "fused_optimizer": None,
        "device_samples": None,
        "intervals": [],
        "trace": None,
        "projection": None,
        "full_step_estimate_s": None,
        "setup": None,
        "wall_s": wall_s,
        "fingerprint": fingerprint,
        "config": config,
    }


def _compile_stats(
    mode: str, raw: Measurement, *, cache_setting: str = "", graph: str | None = None
) -> CompileStats:
    """What torch.compile did in the window, its graph breaks over the whole trial, and whether
    the warm-up's compile came from the cache (the graph's charge is added by the trial, from the
    sweep's record: train/trial/measurement.py)."""
    window, warm = raw["window_compile"], raw["warmup_compile"]
    counts = {k: int(warm.get(k, 0)) for k in CACHE_COUNTS}
    state = cache_state(
        hits=counts["fxgraph_hits"] + counts["autograd_hits"],
        misses=counts["fxgraph_misses"] + counts["autograd_misses"],
        compiled=mode != "none" and warm["frames_compiled"] > 0,
        enabled=cache_setting != "off",
    )
    cache = {
        "state": state,
        **counts,
        "setting": cache_setting,
        "graph": graph,
        "graph_compile_s": None,
        "graph_compile_cache": None,
        "graph_compile_by": None,
    }
    return {
        "mode": mode,
        "frames_compiled_window": window["frames_compiled"],
        "graph_breaks_window": window["graph_breaks"],
        "recompiled_in_window": window["frames_compiled"] > 0,
        "graph_breaks_total": warm["graph_breaks"] + window["graph_breaks"],
        "cache": cast(CompileCache, cache),
    }


def _time_fractions(raw: Measurement, *, world: int) -> TimeFractions:
    fracs = time_fractions(raw["phases"], raw["step_times"])
    if world == 1:
        fracs.pop("comms")  # a single process has no gradient communication to report
    return cast(TimeFractions, fracs)


def _float8_ran(session) -> str:
    """The float8 recipe when at least one linear ran float8 matmuls, else "none"."""
    f8 = getattr(session, "float8", None) or {}
    return f8["recipe"] if f8.get("linears_converted") else "none"


def _mfu(
    tokens_per_s: float, flops_per_token: float, *, peak, ceiling, world: int, basis: str
) -> Mfu:
    """MFU of the global rate against `world` devices' spec peak and measured ceiling. The peak is
    the run's dtype's (bf16 for a float8 trial: `basis` says so), never a float8 peak."""

    def against(ref) -> float | None:
        if not ref:
            return None
        return mfu(
            tokens_per_s=tokens_per_s, flops_per_token=flops_per_token, peak_flops=ref.flops * world
        )

    return {"basis": basis, "spec": against(peak), "ceiling": against(ceiling)}


def _device_info(session, device_name: str | None, *, peak, ceiling) -> DeviceInfo:
    return {
        "type": session.device.type,
        "name": device_name,
        "dtype": session.dtype,
        "peak_flops": peak.flops if peak else None,
        "peak_source": peak.source if peak else None,
        "ceiling_flops": ceiling.flops if ceiling else None,
        "ceiling_source": ceiling.source if ceiling else None,
    }
