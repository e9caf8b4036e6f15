"""Measured matmul ceiling: the FLOP/s a big square matmul actually reaches on this device.

Spec-sheet peaks are the MFU denominator for known GPUs; this number is the honest fallback
for unknown devices (and CPUs), and a sanity check that the spec peak is reachable at all.
Measurements are cached per (device, dtype, TF32, torch, threads, size) because the 8192-cube
matmul on a GPU is cheap but the warm-up and repeats add up over a sweep of many trials. The
cache's path, key and layout are train.measure.ceiling_cache's (torch-free, so the explain CLI
reads the same file).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from train.device import TORCH_DTYPES, device_name, sync, tf32_state
from train.measure.ceiling_cache import cache_key, default_cache_path, load_entries, save_entries

log = logging.getLogger(__name__)

# Largest square sizes: 8192 keeps an H100 busy ~1-2 ms per bf16 matmul (2 * 8192**3 = 1.1 TFLOP),
# enough to hide launch overhead; 1024 on CPU is ~2 GFLOP, ~25 ms fp32 on 2 EPYC cores.
_DEFAULT_SIZE = {"cuda": 8192, "cpu": 1024}
_START_SIZE = 256
_FALLBACK_SIZE = 2048
_NUM_REPEATS = 5


@dataclass(kw_only=True, frozen=True)
class Ceiling:
    """Best measured dense-matmul throughput."""

    flops: float  # FLOP/s of the best repeat (2 * n**3 FLOPs per n x n matmul)
    source: str  # what was timed, e.g. "linear 8192^3 bf16 on NVIDIA H100, best of 5 x 20"
    cached: bool  # True when read from the cache file instead of measured now


def measure_matmul_ceiling(
    device: torch.device,
    dtype: str,
    *,
    size: int | None = None,
    min_time_s: float = 0.3,
    cache_path: Path | None = None,
    use_cache: bool = True,
    refresh: bool = False,
) -> Ceiling:
    """Time an n x n matmul in `dtype` on `device` and return the best FLOP/s seen.

    cache_path None means default_cache_path(); use_cache=False always measures and
    leaves the cache file alone; refresh=True measures and replaces the cached entry (one
    measured while the machine was busy reads low, and every later trial would inherit it).
    """
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype must be one of {sorted(TORCH_DTYPES)}, got {dtype!r}")
    if device.type == "cpu" and dtype == "fp16":
        raise ValueError("dtype='fp16' is not supported on CPU; use bf16 or fp32")
    if min_time_s <= 0:
        raise ValueError(f"min_time_s must be > 0, got {min_time_s}")
    if size is not None and size < 1:
        raise ValueError(f"size must be >= 1 (or None to choose per device), got {size}")
    n_max = size if size is not None else _DEFAULT_SIZE.get(device.type, _FALLBACK_SIZE)

    name = device_name(device)
    key = _cache_key(name=name, dtype=dtype, size=size)
    path = cache_path if cache_path is not None else default_cache_path()
    if use_cache and not refresh:
        hit = load_entries(path).get(key)
        if isinstance(hit, dict) and isinstance(hit.get("flops"), int | float):
            return Ceiling(flops=float(hit["flops"]), source=str(hit.get("source")), cached=True)

    flops, source = _time_matmul(
        device, dtype, n_max=n_max, fixed=size is not None, min_time_s=min_time_s, name=name
    )
    log.info("matmul ceiling: %.3g FLOP/s (%s)", flops, source)
    if use_cache:
        entries = load_entries(path)  # re-read: another process may have written meanwhile
        entries[key] = {"flops": flops, "source": source, "measured_at": time.time()}
        save_entries(path, entries)
    return Ceiling(flops=flops, source=source, cached=False)


def is_stale(ceiling: Ceiling, mfu_ceiling: float | None) -> bool:
    """A cached ceiling the model's whole step beat (MFU against it above 100%) was measured low:
    the step's matmuls cannot outrun the bare matmul on the same device, dtype and threads."""
    return ceiling.cached and mfu_ceiling is not None and mfu_ceiling > 1.0


def _time_matmul(
    device: torch.device, dtype: str, *, n_max: int, fixed: bool, min_time_s: float, name: str
) -> tuple[float, str]:
    """Best-of-repeats FLOP/s; each repeat is long enough to swamp clock and launch noise.

    Unless the size is fixed, start small and double n while one matmul still takes less than
    a repeat's share of min_time_s, stepping back if the last doubling overshot that share by
    more than 2x: slow paths (bf16 on a CPU without bf16 units runs ~100x below fp32) stay
    quick to measure. A smaller matmul reaches a lower fraction of peak, so this errs towards
    a lower ceiling, i.e. a higher MFU. (Growing on time, not on an 8x extrapolation, because
    on a busy CPU even a tiny multi-threaded matmul can take a scheduler slice, ~20 ms.)
    """
    per_repeat_s = min_time_s / _NUM_REPEATS
    n = n_max if fixed else min(_START_SIZE, n_max)
    previous: tuple[int, tuple[torch.Tensor, ...], float] | None = None
    while True:
        operands = _operands(device, dtype, n)
        one_s = _time_one(device, *operands)
        if previous is not None and one_s > 2 * per_repeat_s:
            n, operands, one_s = previous
            break
        if fixed or 2 * n > n_max or one_s > per_repeat_s:
            break
        previous = (n, operands, one_s)
        n *= 2
    a, b, out = operands

    iters = max(1, int(per_repeat_s / one_s))
    best_s = float("inf")
    for _ in range(_NUM_REPEATS):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(iters):
            _matmul(a, b, out)
        sync(device)
        best_s = min(best_s, time.perf_counter() - t0)
    flops = 2 * n**3 * iters / best_s
    source = f"linear {n}^3 {dtype} on {name}, best of {_NUM_REPEATS} x {iters}"
    return flops, source


def _matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    """The matmul the model's layers run: nn.Linear's kernel (x @ W.T). On CUDA it is the same
    cuBLAS GEMM as torch.mm; on CPU, bf16 torch.mm takes a path ~6x slower than linear's oneDNN
    kernel, so timing torch.mm would give a "ceiling" the model itself beats."""
    if a.device.type == "cuda":
        torch.mm(a, b, out=out)
    else:
        out.copy_(torch.nn.functional.linear(a, b))


def _time_one(device: torch.device, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> float:
    """Seconds for one matmul: the faster of two, after a warm-up call (kernel selection)."""
    _matmul(a, b, out)
    best_s = float("inf")
    for _ in range(2):
        sync(device)
        t0 = time.perf_counter()
        _matmul(a, b, out)
        sync(device)
        best_s = min(best_s, time.perf_counter() - t0)
    return max(best_s, 1e-9)


def _operands(
    device: torch.device, dtype: str, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=TORCH_DTYPES[dtype])
    return a, b, torch.empty_like(a)


def _cache_key(*, name: str, dtype: str, size: int | None) -> str:
    return cache_key(
        name=name,
        dtype=dtype,
        tf32=tf32_state().matmul,
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
        size=size,
    )
