"""The trial result: the one versioned contract between `train/` and everything that reads a trial.

Schema (version 2), every key always present; numbers are null where they could not be measured:
  schema_version, status ("complete" | "pruned" | "failed"), failure ({kind, message} or null;
  kinds:
  invalid_config, oom, nan, crash), tokens_per_s, tokens_per_step, step_time_s {p50, p90, mean,
  std, cv,
  min, max, n}, warmup_s, compile_s, compile {mode, frames_compiled_window, graph_breaks_window,
  recompiled_in_window, graph_breaks_total}, time_frac {compute, data_wait, optimizer, checkpoint,
  other} (sums to 1), checkpoint_s [stall per save], checkpoint_bytes, flops_per_token, mfu {spec,
  ceiling}, peak_memory_gib, memory_kind, loss {first, last}, device {type, name, dtype, peak_flops,
  peak_source, ceiling_flops, ceiling_source}, attention_backend, fused_optimizer, device_samples,
  intervals [{step, tokens_per_s, step_time_s, data_wait_frac}], trace, wall_s, fingerprint, config,
  full_step_estimate_s (a full step sized from the last warm-up step), projection (null when the
  window measured real full steps; else {micro_batches_per_step, grad_accum, short_step_s: the
  measured short steps' statistics}: then step_time_s, tokens_per_s and time_frac describe full
  steps projected from the short ones, train/measure/meters.py project_step),
  memory {predicted_gib: the memory model's peak (train/measure/memory_model.py), measured_gib: the
  peak of live tensors in the real training step, measured_by: "cuda_max_memory_allocated" (the
  window's steps) | "cpu_dispatch_counter" (one extra step after the window,
  train/measure/memory_meter.py) | null (not measured: CPU under torch.compile, or a failure)};
  peak_memory_gib/memory_kind are the older whole-allocator/host-RSS reading, kept for readers of
  earlier results.
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from train.measure.flops import mfu
from train.measure.meters import summarize, time_fractions

SCHEMA_VERSION = 2  # 2: projection, full_step_estimate_s, memory
# the `memory` entry before anything is known (measure_memory in train/measure/memory_meter.py
# fills it)
EMPTY_MEMORY: dict[str, Any] = {"predicted_gib": None, "measured_gib": None, "measured_by": None}


@dataclass(frozen=True, kw_only=True)
class TrialFailure:
    kind: str  # invalid_config | oom | nan | crash
    message: str


def classify(exc: BaseException, *, during_setup: bool) -> TrialFailure:
    """Name what went wrong so the sweeper can record it as a reason, not a stack trace."""
    text = f"{type(exc).__name__}: {exc}"
    oom_types = tuple(t for t in (MemoryError, _torch_oom_type()) if t is not None)
    if isinstance(exc, oom_types) or "out of memory" in str(exc).lower():
        return TrialFailure(kind="oom", message=text)
    if isinstance(exc, FloatingPointError):
        return TrialFailure(kind="nan", message=text)
    if isinstance(exc, ValueError) and during_setup:
        return TrialFailure(kind="invalid_config", message=str(exc))
    tail = "".join(traceback.format_exception(exc)[-6:])
    return TrialFailure(kind="crash", message=f"{text}\n{tail}")


def _torch_oom_type() -> type | None:
    import torch

    return getattr(torch.cuda, "OutOfMemoryError", None)


def _config_dict(cfg) -> dict:
    return asdict(cfg) if cfg is not None else {}


def build_result(
    *,
    cfg,
    session,
    raw: dict | None,
    fingerprint: dict,
    wall_s: float,
    failure: TrialFailure | None = None,
    device_name: str | None = None,
    peak=None,
    ceiling=None,
    memory=None,
    memory_report: dict[str, Any] | None = None,
    trace: Path | None = None,
    resolved_config: dict | None = None,
) -> dict[str, Any]:
    """Assemble the result dict from raw measurements (or a failure)."""
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": "failed",
        "failure": asdict(failure) if failure else None,
        "tokens_per_s": None,
        "tokens_per_step": None,
        "step_time_s": None,
        "warmup_s": None,
        "compile_s": None,
        "compile": None,
        "time_frac": None,
        "checkpoint_s": [],
        "checkpoint_bytes": None,
        "flops_per_token": None,
        "mfu": {"spec": None, "ceiling": None},
        "peak_memory_gib": None,
        "memory_kind": None,
        "memory": {**EMPTY_MEMORY, **(memory_report or {})},
        "loss": {"first": None, "last": None},
        "device": None,
        "attention_backend": None,
        "fused_optimizer": None,
        "device_samples": None,
        "intervals": [],
        "trace": None,
        "projection": None,
        "full_step_estimate_s": None,
        "wall_s": wall_s,
        "fingerprint": fingerprint,
        "config": resolved_config if resolved_config is not None else _config_dict(cfg),
    }
    if raw is None or session is None:
        return result

    steps = raw["step_times"]
    stats = summarize(steps)
    tokens_per_s = session.tokens_per_step * len(steps) / sum(steps)
    fpt = session.flops_per_token
    window = raw["window_compile"]
    result.update(
        status="pruned" if raw["pruned"] else "complete",
        tokens_per_s=tokens_per_s,
        tokens_per_step=session.tokens_per_step,
        step_time_s=stats,
        warmup_s=raw["warmup_s"],
        compile_s=raw["warmup_compile"]["compile_s"],
        compile={
            "mode": cfg.runtime.compile,
            "frames_compiled_window": window["frames_compiled"],
            "graph_breaks_window": window["graph_breaks"],
            "recompiled_in_window": window["frames_compiled"] > 0,
            "graph_breaks_total": raw["warmup_compile"]["graph_breaks"] + window["graph_breaks"],
        },
        time_frac=time_fractions(raw["phases"], steps),
        checkpoint_s=raw["checkpoint_s"],
        checkpoint_bytes=raw["checkpoint_bytes"] if raw["checkpoint_s"] else None,
        flops_per_token=fpt,
        mfu={
            "spec": mfu(tokens_per_s=tokens_per_s, flops_per_token=fpt, peak_flops=peak.flops)
            if peak
            else None,
            "ceiling": mfu(tokens_per_s=tokens_per_s, flops_per_token=fpt, peak_flops=ceiling.flops)
            if ceiling
            else None,
        },
        peak_memory_gib=memory.gib if memory else None,
        memory_kind=memory.kind if memory else None,
        loss={"first": raw["loss_first"], "last": raw["loss_last"]},
        device={
            "type": session.device.type,
            "name": device_name,
            "dtype": session.dtype,
            "peak_flops": peak.flops if peak else None,
            "peak_source": peak.source if peak else None,
            "ceiling_flops": ceiling.flops if ceiling else None,
            "ceiling_source": ceiling.source if ceiling else None,
        },
        attention_backend=session.attention_backend,
        fused_optimizer=session.fused_optimizer,
        device_samples=raw["device_samples"],
        intervals=raw["intervals"],
        trace=str(trace) if trace else None,
        projection=raw["projection"],
        full_step_estimate_s=raw["full_step_estimate_s"],
    )
    return result


def write_result(result: dict, path: Path) -> None:
    """Atomic write: a reader never sees half a result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str))
    os.replace(tmp, path)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def format_summary(result: dict, path: Path) -> str:
    """The one-screen human summary printed at the end of a trial."""
    if result["status"] == "failed":
        f = result["failure"]
        return f"trial FAILED ({f['kind']}): {f['message'].splitlines()[0]}\nresult: {path}"
    st, fr, d = result["step_time_s"], result["time_frac"], result["device"]
    lines = [
        f"trial {result['status']}: {result['tokens_per_s']:,.0f} tokens/s on {d['name']} "
        f"({d['type']}, {d['dtype']}, attention={result['attention_backend']})",
        f"  step time  p50 {st['p50'] * 1e3:.1f} ms  p90 {st['p90'] * 1e3:.1f} ms  "
        f"cv {_pct(st['cv'])}  n={st['n']}",
        f"  warm-up    {result['warmup_s']:.2f} s (compile {result['compile_s']:.2f} s)",
        f"  time split compute {_pct(fr['compute'])}  data wait {_pct(fr['data_wait'])}  "
        f"optimizer {_pct(fr['optimizer'])}  checkpoint {_pct(fr['checkpoint'])}  "
        f"other {_pct(fr['other'])}",
        f"  MFU        spec {_pct(result['mfu']['spec'])} "
        f"(peak {d['peak_source'] or 'none for this device'})  "
        f"ceiling {_pct(result['mfu']['ceiling'])} (measured matmul)",
        f"  loss       {result['loss']['first']:.3f} -> {result['loss']['last']:.3f}",
    ]
    proj = result.get("projection")
    if proj:
        lines.append(
            f"  projected  full steps of {proj['grad_accum']} micro-batches from "
            f"{proj['short_step_s']['n']} measured steps of {proj['micro_batches_per_step']} "
            f"(p50 {proj['short_step_s']['p50'] * 1e3:.1f} ms)"
        )
    if result["compile"]["recompiled_in_window"]:
        lines.append("  WARNING: torch.compile recompiled inside the measured window")
    lines.append(f"result: {path}")
    return "\n".join(lines)
