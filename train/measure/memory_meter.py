"""The measured side of the memory model: the peak of live tensor bytes over training steps.

CUDA: `torch.cuda.max_memory_allocated` since a reset (the caching allocator's own count of
bytes handed out to tensors; what a CUDA out-of-memory error is about, less the allocator's cache).

CPU: torch keeps no allocator statistics for the CPU, and the process's RSS is mostly the
interpreter and its libraries, so `PeakMemory` counts tensor storages itself: a TorchDispatchMode
looks at the outputs of every aten op that runs while it is active (backward included: autograd
carries the mode into its engine), adds each storage it has not seen with its size, and a weakref
finalizer on the storage takes the size off when torch frees it. Tensors that exist before the
window (weights, gradients, optimizer state) are registered with `track()`. Checked on this CPU
against torch.profiler's allocation events (profile_memory=True) over the same step: equal to the
byte.

Blind spots (small here): storages made outside the dispatcher (DataLoader workers' batches in
shared memory) and scratch memory inside a single kernel. torch.compile on CPU cannot be measured
this way: while a dispatch mode is active Dynamo runs the model eagerly (checked on torch 2.13),
and inductor's own buffers bypass both the dispatcher and the profiler, so `measure_memory`
reports no CPU measurement for compiled models rather than an eager one under a compiled label.

The counter costs a Python call per aten op: +23% to +45% step time on the tiny and small-cpu
models here (medians of 15 steps, metered against plain, on a shared 2-core CPU), too much inside
a timed window, so the trial measures CPU memory over ONE extra step after the window. The caller
runs that step (`measure_memory(s, step=...)`): the meter sits below `train/run/` and never imports
the training loop.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from train.core.memory_model import MODEL_SHAPE, MemoryInputs, predict_memory
from train.core.units import GIB
from train.device import reset_peak_memory, sync

if TYPE_CHECKING:
    from train.core.config import Config

log = logging.getLogger(__name__)

CUDA_METHOD = "cuda_max_memory_allocated"
CPU_METHOD = "cpu_dispatch_counter"
FUSED_ATTENTION = ("flash", "efficient", "cudnn")


class MeteredSession(Protocol):
    """What the meter reads of a built run (a `train.run.loop.Session` is one)."""

    cfg: Config
    device: torch.device
    dtype: str  # the resolved precision
    attention_backend: str  # the SDPA kernel that actually ran
    raw_model: torch.nn.Module
    optimizer: torch.optim.Optimizer


class _StorageCounter(TorchDispatchMode):
    """Live bytes of the CPU tensor storages seen, and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}  # storage id -> bytes, while alive

    def add(self, t: torch.Tensor) -> None:
        if t.device.type != "cpu" or t.is_sparse:
            return
        storage = t.untyped_storage()
        key = storage._cdata  # the C++ StorageImpl, shared by every view of it
        if key in self._sizes:
            return
        nbytes = storage.nbytes()
        self._sizes[key] = nbytes
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        # torch keeps one Python object per storage for as long as the storage lives, so this
        # fires when the memory is freed, not when our reference goes
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.add(leaf)
        return out


class PeakMemory:
    """Peak of live tensor bytes between `start()` and `stop()` (or as a context manager).

    On CPU, register what is alive before the window with `track()` first; on CUDA the allocator
    knows. On other devices nothing is measured (`measured_gib` and `measured_by` stay None).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._counter = _StorageCounter() if device.type == "cpu" else None
        self._running = False
        self._gib: float | None = None

    @property
    def measured_by(self) -> str | None:
        if self.device.type == "cuda":
            return CUDA_METHOD
        return CPU_METHOD if self._counter is not None else None

    @property
    def measured_gib(self) -> float | None:
        """The peak in GiB once stopped; None before, or where nothing can be measured."""
        return self._gib

    def track(self, tensors: Iterable[torch.Tensor]) -> None:
        """Count tensors that already exist (CPU; a no-op elsewhere)."""
        if self._counter is not None:
            for t in tensors:
                self._counter.add(t)

    def start(self) -> None:
        if self._running:
            raise RuntimeError("PeakMemory.start() called twice")
        self._running = True
        self._gib = None
        if self.device.type == "cuda":
            sync(self.device)
            reset_peak_memory(self.device)
        elif self._counter is not None:
            self._counter.peak = self._counter.live
            self._counter.__enter__()

    def stop(self) -> None:
        if not self._running:
            raise RuntimeError("PeakMemory.stop() called before start()")
        self._running = False
        if self.device.type == "cuda":
            sync(self.device)
            self._gib = torch.cuda.max_memory_allocated(self.device) / GIB
        elif self._counter is not None:
            self._counter.__exit__(None, None, None)
            self._gib = self._counter.peak / GIB

    def __enter__(self) -> PeakMemory:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def training_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[Any]:
    """Every tensor a training step starts with: parameters, buffers, gradients, optimizer state."""
    yield from model.parameters()
    yield from model.buffers()
    yield from (p.grad for p in model.parameters() if p.grad is not None)
    for state in optimizer.state.values():
        yield from (v for v in state.values() if isinstance(v, torch.Tensor))


def session_inputs(s: MeteredSession) -> MemoryInputs:
    """The memory model's view of a built session (the SDPA kernel that actually ran, the dtype
    the run resolved to)."""
    mc, rt = s.cfg.model, s.cfg.runtime
    kernel = s.attention_backend if s.attention_backend in (*FUSED_ATTENTION, "math") else "auto"
    return MemoryInputs(
        **{name: getattr(mc, name) for name in MODEL_SHAPE},
        micro_batch=s.cfg.batch.micro_batch,
        dtype=s.dtype,
        attention=kernel,
        activation_checkpointing=rt.activation_checkpointing,
        loss=rt.loss,
        compile=rt.compile,
        float8=rt.float8,
        device_type="cuda" if s.device.type == "cuda" else "cpu",
        grad_accum=s.cfg.batch.grad_accum,
    )


def predicted_gib(s: MeteredSession) -> float | None:
    """The memory model's peak for this session, or None (with a warning) if it cannot say."""
    try:
        return predict_memory(session_inputs(s)).peak_gib
    except ValueError as exc:
        log.warning("no memory prediction: %s", exc)
        return None


def measure_memory(
    s: MeteredSession, *, step: Callable[[int], object]
) -> dict[str, float | str | None]:
    """The trial result's `memory` entry: {predicted_gib, measured_gib, measured_by}.

    Call it right after the measured window. CUDA: the allocator's peak since the reset after
    warm-up (the window's steps). CPU, eager: one extra optimizer step under the counter (of two
    micro-batches at most); `step(n)` runs that step of `n` micro-batches, untimed. Otherwise (CPU
    with torch.compile, other devices) measured_gib and measured_by are None.
    """
    entry: dict[str, float | str | None] = {
        "predicted_gib": predicted_gib(s),
        "measured_gib": None,
        "measured_by": None,
    }
    if s.device.type == "cuda":
        entry["measured_gib"] = torch.cuda.max_memory_allocated(s.device) / GIB
        entry["measured_by"] = CUDA_METHOD
    elif s.device.type == "cpu" and s.cfg.runtime.compile == "none":
        accum = s.cfg.batch.grad_accum
        meter = PeakMemory(s.device)
        meter.track(training_tensors(s.raw_model, s.optimizer))
        # two micro-batches reach the step's peak (the second runs with `.grad` and the first's
        # logits alive), so a long grad_accum need not be taken in full
        with meter:
            step(min(2, accum))
        entry["measured_gib"] = meter.measured_gib
        entry["measured_by"] = meter.measured_by
    elif s.device.type == "cpu":
        log.info("CPU memory is not measured under torch.compile (train/measure/memory_meter.py)")
    return entry
