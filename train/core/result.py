"""The trial result: the one versioned contract between `train/` and everything that reads a trial.

A trial writes one JSON object, `TrialResult` below (built by train/core/result_build.py from the
trial's raw measurements); the sweeper, MLflow logging, `explain` and the benchmark scripts read it
back with `read_result` or `load_result`. Every key is always present;
numbers are null where they could not be measured (a failed trial has a `failure` and little
else). The TypedDicts are the schema: each field's comment says what it holds and in what unit.

Version history: 1 was the first schema; 2 added `projection`, `full_step_estimate_s` and
`memory`; 3 added `world_size`, `time_frac.comms` (data-parallel results only) and `loss.steps`;
4 added `float8` (which float8 matmuls ran; null without them) and `mfu.basis`; 5 added
`loss.lr` (each step's lr: trials train at the production schedule's, warm-up included); 6
added `setup`; 7 added `loss.more_seeds` (trial.seeds > 1: more curves from one process) and
`checkpoint_save` (a save measured once per sweep and target, trial.save_record).
Readers accept every version up to `SCHEMA_VERSION`: they read the later keys with `.get()`.

Two names are kept as they are for compatibility with results already on disk, although they are
not what a newcomer would guess. `step_time_s` is the measured window's statistics (`StepTimes`)
at the top level, but one interval's median step in seconds (a float) inside `intervals`.
`peak_memory_gib` and `memory_kind` are the older whole-allocator / host-RSS reading; `memory`
holds the tensor peak measured like the memory model predicts it.

Part of the torch-free core (train/core/): the sweeper reads results with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, cast

# 2: projection, full_step_estimate_s, memory; 3: world_size, comms, loss.steps; 4: float8, basis;
# 5: loss.lr; 6: setup; 7: loss.more_seeds, checkpoint_save
SCHEMA_VERSION = 7
# the result's file in a sweep's trial job folder (sweeper/launch/runner.py writes it there); a
# re-run's trial.json (`python -m train.trial --pinned <job>/trial_config.yaml`) is not one of them
RESULT_NAME = "result.json"

Status = Literal["complete", "pruned", "failed"]
# timeout: a data-parallel collective waited past ddp.timeout_s on a rank that hung or died
FailureKind = Literal["invalid_config", "oom", "nan", "disk_full", "timeout", "crash"]
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "invalid_config",
    "oom",
    "nan",
    "disk_full",
    "timeout",
    "crash",
)
# A trial's state as the sweeper records it: a measured ending (a pruned trial still reports its
# values), or the kind of its failure.
MEASURED_STATES = ("complete", "pruned")
TRIAL_STATES = (*MEASURED_STATES, *FAILURE_KINDS)


class Failure(TypedDict):
    """Why a trial failed, as a reason the sweeper can record rather than a stack trace."""

    kind: FailureKind
    # the exception's text; for a crash, the last frames of its traceback too; for disk_full one
    # line: the path, the free space and the fix
    message: str


class StepTimes(TypedDict):
    """Statistics of the measured window's optimizer steps in seconds (meters.py `summarize`)."""

    p50: float
    p90: float
    mean: float
    std: float  # the sample standard deviation
    cv: float  # std / mean
    min: float
    max: float
    n: int  # the number of measured steps


class CompileStats(TypedDict):
    """What torch.compile did: frames compiled and graph breaks inside the measured window, and
    graph breaks over the whole trial (train/measure/compile_stats.py)."""

    mode: str  # runtime.compile
    frames_compiled_window: int
    graph_breaks_window: int
    recompiled_in_window: bool  # a frame compiled inside the window: its steps include compiling
    graph_breaks_total: int
    # whether the warm-up's compile came from the compile cache, and the compile time_to_train
    # charges for the graph (absent in results written before the shared compile cache)
    cache: NotRequired[CompileCache]


class CompileCache(TypedDict):
    """The compile cache's part in a trial's compile (train/core/compile_cache.py), and the graph's
    compile as the sweep charges it (train/core/compile_graphs.py)."""

    # hit (warm) | miss (cold) | partial | off (caches disabled: cold) | none (nothing compiled)
    state: str
    fxgraph_hits: int  # Inductor FX-graph cache lookups that found the graph
    fxgraph_misses: int
    autograd_hits: int  # AOTAutograd cache lookups that found the graph
    autograd_misses: int
    setting: str  # runtime.compile_cache: '' (torch's default), 'off' or the folder
    graph: str | None  # the graph's key (compile_graphs.graph_key); None when eager
    # seconds charged for compiling this graph: its first compile measured in the sweep's record
    # (the same for every trial of the graph), else this trial's own compile_s
    graph_compile_s: float | None
    graph_compile_cache: str | None  # that measurement's state: miss or off = a cold compile
    graph_compile_by: str | None  # the job folder that measured it


class TimeFractions(TypedDict, total=False):
    """The share of the measured wall time each phase took; they sum to 1."""

    compute: float
    data_wait: float
    optimizer: float
    checkpoint: float
    # data-parallel results only: the all-reduce the step waited for after its backward
    comms: float
    other: float  # what no phase claimed: the step's sync, the lr update, Python between phases


class Mfu(TypedDict):
    """Model FLOPs utilisation against the spec peak (null off a GPU or for an unknown one) and
    against the measured matmul ceiling."""

    spec: float | None
    ceiling: float | None
    # what `spec` is measured against, in words (train/core/flops.py mfu_basis): "bf16 dense
    # peak", or for a float8 trial "bf16-equivalent (...)": the same 6N + 12LHQT model FLOPs
    # against the bf16 dense peak, not the float8 peak (schema 4; absent before)
    basis: str | None


class Float8(TypedDict):
    """The float8 matmuls a trial ran (runtime.float8, train/model/float8.py float8_report)."""

    recipe: str  # tensorwise | rowwise: torchao's scaling granularity
    emulated: bool  # torchao's emulate mode: float8 rounding, high-precision matmuls (no speed-up)
    linears_converted: int  # linears that ran float8 matmuls
    linears_total: int  # every linear of the model (the tied LM head stays bf16)


class Memory(TypedDict):
    """The tensor peak, predicted and measured."""

    predicted_gib: float | None  # the memory model's peak (train/core/memory_model.py)
    measured_gib: float | None  # the peak of live tensors in the real training step
    # "cuda_max_memory_allocated" (the window's steps), "cpu_dispatch_counter" (one extra step
    # after the window, train/measure/memory_meter.py), or None: not measured (a CPU under
    # torch.compile, or a failure)
    measured_by: str | None


class SeedCurve(TypedDict, total=False):
    """One more seed's curve from the same process (trial.seeds > 1, train/trial/seeds.py)."""

    seed: int  # its runtime.seed
    steps: list[float]  # every step's mean loss, warm-up first (absent where it failed)
    lr: list[float]  # the lr of each of those steps
    failed: str  # why the curve stopped (a non-finite loss); absent where it trained
    wall_s: float  # seconds it took in the process, its re-draw included
    frames_compiled: int  # torch.compile frames it compiled (0: the first seed's graphs reused)


class Loss(TypedDict, total=False):
    first: float | None  # the first warm-up step's mean loss
    last: float | None  # the last measured step's mean loss
    steps: list[float]  # every step's mean loss over the global batch, warm-up steps first
    lr: list[float]  # the lr each of those steps trained at (the production schedule's)
    # the curves of the seeds after runtime.seed's, trained in the same process (trial.seeds)
    more_seeds: list[SeedCurve]


class DeviceInfo(TypedDict):
    """The device the trial ran on and the peaks its MFU is measured against."""

    type: str  # cuda | cpu | mps
    name: str | None
    dtype: str  # the resolved precision: fp32 | bf16 | fp16
    peak_flops: float | None  # from the cited table in train/core/flops.py
    peak_source: str | None
    ceiling_flops: float | None  # the measured matmul ceiling (train/measure/ceiling.py)
    ceiling_source: str | None


class Interval(TypedDict):
    """One reporting interval of the window (every `trial.report_every` steps)."""

    step: int  # the measured step the interval ends at
    tokens_per_s: float
    step_time_s: float  # the interval's median step in seconds: a float here, unlike StepTimes
    data_wait_frac: float


class Projection(TypedDict):
    """Present when the window measured short steps and projected full ones from them
    (train/core/meters.py project_step); `step_time_s`, `tokens_per_s` and `time_frac` of the
    result then describe the projected full steps."""

    micro_batches_per_step: int  # micro-batches in each measured short step
    grad_accum: int  # micro-batches in a full step
    short_step_s: StepTimes  # the measured short steps


class TrialResult(TypedDict):
    """The JSON a trial writes (schema version `SCHEMA_VERSION`)."""

    schema_version: int
    status: Status
    failure: Failure | None
    tokens_per_s: float | None
    tokens_per_step: int | None  # the global figure (all data-parallel processes)
    world_size: int | None  # data-parallel processes (runtime.nproc); 1 in one process
    step_time_s: StepTimes | None
    warmup_s: float | None  # the warm-up steps, compile included
    compile_s: float | None  # torch.compile's share of the warm-up
    compile: CompileStats | None
    time_frac: TimeFractions | None
    checkpoint_s: list[float]  # the stall of each save in the window
    checkpoint_bytes: int | None
    # trial.save_record set (a sweep that searches no checkpoint knob): the window saved nothing
    # and this is the target's save, measured once in the sweep (train/core/save_record.py
    # SaveCost's fields, and `here`: whether this trial measured it); null otherwise
    checkpoint_save: dict[str, Any] | None
    flops_per_token: float | None
    mfu: Mfu
    peak_memory_gib: float | None  # the older reading: see the module docstring
    memory_kind: str | None
    memory: Memory
    loss: Loss
    device: DeviceInfo | None
    attention_backend: str | None
    float8: Float8 | None  # which float8 matmuls ran; null: none (bf16/fp32 matmuls only)
    fused_optimizer: bool | None
    device_samples: dict[str, Any] | None  # NVML's utilisation summary (train/measure/nvml.py)
    intervals: list[Interval]
    trace: str | None  # the torch.profiler trace's path, when trial.profile
    projection: Projection | None
    full_step_estimate_s: float | None  # a full step sized from the last warm-up step
    # seconds of set-up before the first step, by phase (train/trial/setup_clock.py)
    setup: dict[str, float | None] | None
    wall_s: float  # the trial's whole wall time, set-up included
    fingerprint: dict[str, Any]  # the environment (train/measure/fingerprint.py)
    config: dict[str, Any]  # the resolved trainer config


def write_result(result: TrialResult, path: Path) -> None:
    """Atomic write: a reader never sees half a result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str))
    os.replace(tmp, path)


class ResultError(ValueError):
    """A file that should hold a trial result does not: it is unreadable, not JSON, not an
    object, or of a schema version this code does not know."""


def load_result(path: Path) -> TrialResult:
    """The trial result in `path`; raises ResultError naming the file and what is wrong with it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # a JSONDecodeError is a ValueError
        raise ResultError(f"unreadable {path.name}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ResultError(f"{path.name} is not a JSON object")
    version = doc.get("schema_version")
    if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
        raise ResultError(
            f"{path.name} has schema_version {version!r}, not a trial result this code reads "
            f"(1..{SCHEMA_VERSION}); re-run the trial with this checkout"
        )
    return cast(TrialResult, doc)


def read_result(path: Path | None) -> TrialResult | None:
    """The trial result in `path`, or None when there is none: no path, no file yet, or a file
    that is not a readable result (`load_result` says why, for a caller that reports it)."""
    if path is None or not Path(path).is_file():
        return None
    try:
        return load_result(path)
    except ResultError:
        return None
