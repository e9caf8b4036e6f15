"""The rules that span fields, applied to a whole trainer config before any step runs:
`check_batch` (the split keeps the tokens per step) and `check_combinations` (combinations that
cannot work or give wrong answers on the device). The rules themselves are stated on plain values in
train/core/rules.py, which the sweeper calls too. Part of the torch-free core (train/core/).
"""

from __future__ import annotations

import logging
import os

from train.core.config import BatchConfig, Config
from train.core.rules import (
    attention_dtype_conflict,
    cudagraph_conflict,
    dtype_unsupported,
    flash_impl_unsupported,
    float8_unsupported,
    valid_splits,
    world_size,
)

log = logging.getLogger(__name__)


def check_batch(batch: BatchConfig, *, block_size: int, world: int = 1) -> None:
    """Refuse a split that changes the tokens per step, listing the splits that keep it."""
    got = batch.micro_batch * batch.grad_accum * block_size * world
    if got == batch.tokens_per_step:
        return
    splits = valid_splits(tokens_per_step=batch.tokens_per_step, block_size=block_size, world=world)
    if not splits:
        raise ValueError(
            f"batch.tokens_per_step={batch.tokens_per_step} is not a multiple of model.block_size "
            f"({block_size}) x world size ({world}); pick a multiple of {block_size * world}"
        )
    listed = ", ".join(f"{mb}x{ga}" for mb, ga in splits)
    raise ValueError(
        f"batch.micro_batch ({batch.micro_batch}) x batch.grad_accum ({batch.grad_accum}) x "
        f"model.block_size ({block_size}) x world ({world}) = {got}, but batch.tokens_per_step is "
        f"{batch.tokens_per_step}. Valid micro_batch x grad_accum splits: {listed}"
    )


def check_combinations(
    cfg: Config,
    *,
    device_type: str,
    dtype: str | None = None,
    capability: tuple[int, int] | None = None,
    flash_impls: list[str] | None = None,
) -> None:
    """Cross-field rules: combinations that cannot work or give wrong answers are refused up
    front. `dtype` is the resolved precision where the caller knows it (runtime.dtype=auto
    depends on the device); without it, auto is taken as bf16 on CUDA. `capability` is the CUDA
    device's compute capability and `flash_impls` the flash attention implementations the
    installed torch lists (lower-cased), where the caller knows them."""
    check_batch(cfg.batch, block_size=cfg.model.block_size, world=world_size(cfg.runtime.nproc))
    rt = cfg.runtime
    conflict = attention_dtype_conflict(
        rt.attention, rt.dtype, device_type=device_type, bf16_supported=dtype != "fp32"
    )
    if conflict:
        raise ValueError(
            f"{conflict}. Use runtime.dtype=bf16 (a GPU with bf16) or fp16, or "
            f"runtime.attention=efficient, math or auto"
        )
    conflict = cudagraph_conflict(rt.compile, cfg.batch.grad_accum, device_type=device_type)
    if conflict:
        raise ValueError(
            f"{conflict}: CUDA graphs with gradient accumulation error or silently corrupt "
            f"gradients. Use runtime.compile=max-autotune-no-cudagraphs or default, or "
            f"grad_accum=1"
        )
    unsupported = dtype_unsupported(rt.dtype, device_type=device_type)
    if unsupported:
        raise ValueError(f"{unsupported}; use bf16 or fp32")
    unsupported = float8_unsupported(
        rt.float8,
        dtype=dtype or rt.dtype,
        device_type=device_type,
        capability=capability,
        emulate=rt.float8_emulate,
    ) or flash_impl_unsupported(rt.attention, device_type=device_type, installed=flash_impls)
    if unsupported:
        raise ValueError(str(unsupported))
    cpus = len(os.sched_getaffinity(0))
    if cfg.data.num_workers + max(rt.threads, 1) > 2 * cpus:
        log.warning(
            "data.num_workers=%d plus runtime.threads=%d oversubscribe %d CPUs",
            cfg.data.num_workers,
            rt.threads,
            cpus,
        )
