"""Setting one training process up on its device: pick it, mixed precision, the loss scaler,
threads.

Everything the trainer needs to know about "where does the math run" lives here and in
`train/device.py` (the device's name, the sync before a clock read, the TF32 switches, memory
peaks: what the meters read too, so it sits below both `measure/` and `run/`), so the loop itself
never branches on `device.type`. Those names are re-exported here: `dev.sync`, `dev.set_tf32` and
the rest keep working for the loop and the scripts.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import torch

from train.core.rules import dtype_unsupported
from train.device import (
    DTYPES,
    MemoryReading,
    Tf32State,
    cpu_model_name,
    device_name,
    peak_memory_gib,
    reset_peak_memory,
    set_tf32,
    sync,
    tf32_state,
)

__all__ = [
    "DTYPES",
    "MemoryReading",
    "Tf32State",
    "autocast",
    "cpu_model_name",
    "device_name",
    "grad_scaler",
    "peak_memory_gib",
    "reset_peak_memory",
    "resolve_device",
    "restored_threads",
    "set_tf32",
    "set_threads",
    "sync",
    "tf32_state",
    "use_device",
]

_CUDA_RE = re.compile(r"^cuda(?::(\d+))?$")


def resolve_device(requested: str) -> torch.device:
    """Turn runtime.device ("auto", "cpu", "cuda", "cuda:N") into a torch.device.

    CUDA devices always come back with an explicit index so that NVML sampling and
    memory queries address the same GPU the model runs on.
    """
    if requested == "cpu":
        return torch.device("cpu")
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    match = _CUDA_RE.match(requested)
    if match is None:
        raise ValueError(
            f"runtime.device must be one of 'auto', 'cpu', 'cuda' or 'cuda:N', got {requested!r}"
        )
    if not torch.cuda.is_available():
        raise ValueError(
            f"runtime.device={requested!r} but torch.cuda.is_available() is False "
            f"(torch {torch.__version__} built without CUDA or no GPU visible); "
            "use runtime.device=auto or cpu"
        )
    if match.group(1) is None:
        return torch.device("cuda", torch.cuda.current_device())
    index = int(match.group(1))
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"runtime.device={requested!r} but only {count} CUDA device(s) are visible; "
            f"use an index in 0..{count - 1}"
        )
    return torch.device("cuda", index)


def autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager[None]:
    """Mixed-precision context for the forward pass; "fp32" means no autocast at all."""
    if dtype not in DTYPES:
        raise ValueError(f"runtime.dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if dtype == "fp32":
        return contextlib.nullcontext()
    unsupported = dtype_unsupported(dtype, device_type=device.type)  # fp16 on a CPU
    if unsupported:
        raise ValueError(f"{unsupported}; use bf16 or fp32")
    if device.type == "cuda" and dtype == "bf16" and not _cuda_bf16_supported(device):
        raise ValueError(
            f"runtime.dtype='bf16' but {torch.cuda.get_device_name(device)} has no native bf16 "
            "support (needs compute capability >= 8.0); use fp16 or fp32"
        )
    return torch.autocast(device_type=device.type, dtype=DTYPES[dtype])


def _cuda_bf16_supported(device: torch.device) -> bool:
    """Native bf16 only: emulated bf16 on pre-Ampere GPUs would make throughput numbers lie."""
    with torch.cuda.device(device):
        try:
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch < 2.5 has no `including_emulation` and never emulates
            return torch.cuda.is_bf16_supported()


def use_device(device: torch.device) -> None:
    """Make a CUDA `device` the current one (a no-op for other devices), so that streams, events
    and torch.cuda calls naming no device address the GPU the model is on, and no stray context
    is made on GPU 0."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def grad_scaler(device: torch.device, dtype: str) -> torch.amp.GradScaler:
    """Loss scaler, enabled only for fp16 on CUDA (bf16 has fp32's exponent range, needs none)."""
    enabled = device.type == "cuda" and dtype == "fp16"
    return torch.amp.GradScaler(device.type, enabled=enabled)


def set_threads(n: int) -> int:
    """Set torch's intra-op thread count (0 keeps torch's default); returns the count in effect."""
    if n < 0:
        raise ValueError(f"runtime.threads must be >= 0 (0 = torch default), got {n}")
    if n > 0:
        torch.set_num_threads(n)
    return torch.get_num_threads()


@contextlib.contextmanager
def restored_threads() -> Iterator[None]:
    """Put torch's thread count back on exit (tests, and trials that change it)."""
    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)
