"""The device one training process runs on: choosing it, its name, a sync before a clock read,
mixed precision and the loss scaler, the TF32 switches, threads and the peak-memory reading.

Everything the trainer asks of "where does the math run" lives here, so the loop never branches on
`device.type`. The lowest torch module in train/: `measure/` (the ceiling, the fingerprint, the
memory meter) and `run/` (the session and the step) both build on it, so the meters never import
the training process.
"""

from __future__ import annotations

import contextlib
import logging
import platform
import re
import resource
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from train.core.rules import dtype_unsupported
from train.core.units import GIB

log = logging.getLogger(__name__)

# runtime.dtype's precisions (all but "auto") as torch dtypes.
TORCH_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def sync(device: torch.device) -> None:
    """Wait for queued device work; call before every clock read (CUDA kernels are async)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def cpu_model_name() -> str:
    """The CPU model string ("AMD EPYC 7B13"), from /proc/cpuinfo on Linux, else `platform`."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown cpu"


def device_name(device: torch.device) -> str:
    """Human-readable device name; keys the peak-FLOPs table and the matmul-ceiling cache."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return cpu_model_name()
    return device.type


@dataclass(kw_only=True, frozen=True)
class Tf32State:
    """The two global TF32 switches, saved so a caller can put them back."""

    # fp32 matmuls on CUDA may run on TF32 tensor cores (cuBLAS; off by default in torch).
    matmul: bool
    # fp32 convolutions and RNNs in cuDNN may use TF32 (on by default in torch).
    cudnn: bool


def _has_fp32_precision_api() -> bool:
    """torch >= 2.9 sets TF32 per backend and op (`fp32_precision`); older torch has only the
    `allow_tf32` switches. A reader of one API raises once a switch was written through the
    other alone, so set_tf32 writes through one of them, never a mix."""
    return hasattr(torch.backends, "fp32_precision")


def tf32_state() -> Tf32State:
    """Current TF32 switches (part of the matmul-ceiling cache key)."""
    if _has_fp32_precision_api():
        # These getters resolve op -> backend -> global inheritance and never raise.
        return Tf32State(
            matmul=torch.backends.cuda.matmul.fp32_precision == "tf32",
            cudnn=torch.backends.cudnn.conv.fp32_precision == "tf32",
        )
    return Tf32State(
        matmul=torch.backends.cuda.matmul.allow_tf32, cudnn=torch.backends.cudnn.allow_tf32
    )


def set_tf32(enabled: bool | Tf32State) -> Tf32State:
    """Allow (or forbid) TF32 for fp32 matmuls and convs; returns the previous state.

    Pass the returned Tf32State back in to restore it. TF32 only changes anything on
    Ampere or newer GPUs; on CPU the flags are inert.
    """
    previous = tf32_state()
    new = enabled if isinstance(enabled, Tf32State) else Tf32State(matmul=enabled, cudnn=enabled)
    if _has_fp32_precision_api():
        _set_fp32_precision(new)
    else:
        torch.backends.cuda.matmul.allow_tf32 = new.matmul
        torch.backends.cudnn.allow_tf32 = new.cudnn
    return previous


def _set_fp32_precision(state: Tf32State) -> None:
    """torch >= 2.9: write each switch so that every reader inside torch can still answer.

    Matmuls go through torch.set_float32_matmul_precision, the one setter that writes both the
    per-backend precision and the global torch.get_float32_matmul_precision() returns. Inductor
    still reads that global (autotuning cache keys, up to torch 2.13 at least): after writing only
    torch.backends.cuda.matmul.fp32_precision = "tf32", torch.compile(mode="max-autotune") failed
    with "mix of the legacy and new APIs" on an H100 with torch 2.11. The setter also sets
    oneDNN's CPU matmul precision, which runtime.tf32 is not about, so that is put back.

    cuDNN goes through the per-op API, conv and RNN alike. The legacy reader
    torch.backends.cudnn.allow_tf32 then refuses to answer while TF32 is off; only Inductor's
    convolution lowering reads it, and GPT-2 has no convolutions.
    """
    onednn_matmul = torch.backends.mkldnn.matmul.fp32_precision
    torch.set_float32_matmul_precision("high" if state.matmul else "highest")
    torch.backends.mkldnn.matmul.fp32_precision = onednn_matmul
    cudnn = "tf32" if state.cudnn else "ieee"
    torch.backends.cudnn.conv.fp32_precision = cudnn
    torch.backends.cudnn.rnn.fp32_precision = cudnn


@dataclass(kw_only=True, frozen=True)
class MemoryReading:
    """A peak-memory number together with what was actually measured."""

    # Peak in GiB (2**30 bytes).
    gib: float
    # "cuda_allocated": torch.cuda.max_memory_allocated (tensors only, not the allocator's cache);
    # "host_rss_peak": the process's peak resident set size (everything, incl. Python + libs).
    kind: str
    # True when the peak could not be reset and so covers the whole process life (earlier
    # trials in the same process included); False when it covers only the last reset's window.
    whole_process: bool


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window (e.g. after warm-up, or at the start of a sweep trial)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "cpu":
        _reset_host_hwm()


def peak_memory_gib(device: torch.device) -> MemoryReading | None:
    """Peak memory since the last reset: CUDA allocator peak, or host peak RSS on CPU."""
    if device.type == "cuda":
        return MemoryReading(
            gib=torch.cuda.max_memory_allocated(device) / GIB,
            kind="cuda_allocated",
            whole_process=False,
        )
    if device.type != "cpu":
        return None
    hwm_kib = _read_host_hwm_kib()
    if hwm_kib is not None:
        return MemoryReading(gib=hwm_kib * 1024 / GIB, kind="host_rss_peak", whole_process=False)
    # getrusage(2): ru_maxrss is KiB on Linux but bytes on macOS; it never resets.
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = max_rss if sys.platform == "darwin" else max_rss * 1024
    return MemoryReading(gib=rss_bytes / GIB, kind="host_rss_peak", whole_process=True)


# Linux keeps the RSS high-water mark as VmHWM in /proc/self/status; writing "5" to
# /proc/self/clear_refs resets it to the current RSS (proc(5), Linux >= 4.0).
_HWM_RESET_OK: bool = False


def _reset_host_hwm() -> None:
    global _HWM_RESET_OK
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _HWM_RESET_OK = True
    except OSError as err:
        log.debug("cannot reset host peak RSS (%s); it will cover the whole process", err)


def _read_host_hwm_kib() -> int | None:
    """VmHWM in KiB, only if a reset has worked (otherwise ru_maxrss says the same, honestly)."""
    if not _HWM_RESET_OK:
        return None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


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
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"runtime.dtype must be one of {sorted(TORCH_DTYPES)}, got {dtype!r}")
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
    return torch.autocast(device_type=device.type, dtype=TORCH_DTYPES[dtype])


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
