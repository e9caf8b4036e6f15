"""The rules a trainer config obeys across its fields, on plain values: the batch split, the
precision a run resolves to, the blocks activation checkpointing recomputes, and the combinations
that cannot work (CUDA graphs with gradient accumulation, fp16 on a CPU, flash or cuDNN attention
in fp32).

Torch-free (listed in `train.TORCH_FREE`) and below the schema: it imports nothing from train/.
Each rule is stated once, here, and the sweeper refuses points with the very functions the trainer
refuses configs with (`dtype_unsupported`, `cudagraph_conflict`, `attention_dtype_conflict`,
`resolve_dtype_name`, `sequences_per_device`, `valid_splits`, `grad_accum_for`,
`num_checkpointed_blocks`). `train/config.py` applies them to a whole config (`check_batch`,
`check_combinations`) and re-exports them, so `from train.config import resolve_dtype_name` works
as it always has.
"""

from __future__ import annotations

import os
import re
from typing import Any

# Modes that capture CUDA graphs. With gradient accumulation they error or silently produce wrong
# gradients (pytorch/pytorch#169545, #96693), so such combinations are refused.
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
# SDPA backends whose CUDA kernels take fp16/bf16 only: torch's can_use_flash_attention and
# can_use_cudnn_attention (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) accept kHalf and
# kBFloat16, the efficient kernel also kFloat. Seen on an H100 with torch 2.11: fp32 causal SDPA
# runs forward and backward under efficient and math, and raises under flash and cudnn.
HALF_ONLY_CUDA_ATTENTION = ("flash", "cudnn")


def parse_activation_checkpointing(s: str) -> int:
    """ "none" -> 0, "every" -> 1, "every_<k>" -> k (checkpoint every k-th block)."""
    if s == "none":
        return 0
    if s == "every":
        return 1
    m = re.fullmatch(r"every_([0-9]+)", s)
    if m and int(m.group(1)) >= 1:
        return int(m.group(1))
    raise ValueError(
        f"runtime.activation_checkpointing must be 'none', 'every' or 'every_<k>' with k >= 1 "
        f"(e.g. 'every_2'), got {s!r}"
    )


def num_checkpointed_blocks(n_layer: int, activation_checkpointing: str) -> int:
    """Blocks recomputed in backward: block i is checkpointed when (i + 1) % k == 0 (the model's
    rule, train.model.gpt), so n_layer // k of them."""
    k = parse_activation_checkpointing(activation_checkpointing)
    return n_layer // k if k else 0


def world_size(nproc: int = 1) -> int:
    """Processes taking part in one optimizer step: torchrun's WORLD_SIZE inside a launched
    process, else the runtime.nproc the run will be launched with."""
    return int(os.environ.get("WORLD_SIZE", nproc))


def sequences_per_device(*, tokens_per_step: int, block_size: int, world: int = 1) -> int | None:
    """Sequences one device runs per optimizer step (micro_batch x grad_accum), or None when the
    tokens per step do not divide evenly into sequences on `world` devices."""
    n, rem = divmod(tokens_per_step, block_size * world)
    return n if n > 0 and rem == 0 else None


def valid_splits(*, tokens_per_step: int, block_size: int, world: int = 1) -> list[tuple[int, int]]:
    """Every (micro_batch, grad_accum) with micro_batch x grad_accum x block_size x world ==
    tokens_per_step."""
    per_device = sequences_per_device(
        tokens_per_step=tokens_per_step, block_size=block_size, world=world
    )
    if per_device is None:
        return []
    return [(mb, per_device // mb) for mb in range(1, per_device + 1) if per_device % mb == 0]


def grad_accum_for(
    micro_batch: Any, *, tokens_per_step: int, block_size: int, world: int = 1
) -> int | None:
    """The grad_accum that keeps the tokens per step at this micro_batch, or None if none does."""
    per_device = sequences_per_device(
        tokens_per_step=tokens_per_step, block_size=block_size, world=world
    )
    if per_device is None or not isinstance(micro_batch, int) or micro_batch < 1:
        return None
    return per_device // micro_batch if per_device % micro_batch == 0 else None


def resolve_dtype_name(requested: str, *, device_type: str, bf16_supported: bool) -> str:
    """runtime.dtype as a run resolves it: `auto` is bf16 on a CUDA device that has it, else fp32
    (bf16 is slower than fp32 on most CPUs). Torch-free: the trainer (train.run.loop.resolve_dtype),
    the sweeper and the memory model all resolve through this one rule."""
    if requested in (None, "auto"):
        return "bf16" if device_type == "cuda" and bf16_supported else "fp32"
    return str(requested)


def dtype_unsupported(dtype: str, *, device_type: str, bf16_supported: bool = True) -> str | None:
    """Why a device of `device_type` cannot compute in the resolved `dtype`, or None. CPU fp16
    kernels are slow or missing for many ops, so a result there would mean nothing; a CUDA device
    without native bf16 would emulate it and make the throughput numbers lie."""
    if device_type == "cpu" and dtype == "fp16":
        return "runtime.dtype=fp16 is not supported on CPU"
    if device_type == "cuda" and dtype == "bf16" and not bf16_supported:
        return "runtime.dtype=bf16 on a CUDA device without bf16 support"
    return None


def cudagraph_conflict(compile_mode: Any, grad_accum: Any, *, device_type: str) -> str | None:
    """Why torch.compile mode `compile_mode` cannot run with `grad_accum` micro-batches per step
    on `device_type`, or None. The CUDAGRAPH_MODES capture CUDA graphs, which with gradient
    accumulation error or silently corrupt gradients (pytorch/pytorch#169545, #96693)."""
    if device_type != "cuda" or compile_mode not in CUDAGRAPH_MODES or (grad_accum or 1) <= 1:
        return None
    return (
        f"runtime.compile={compile_mode} captures CUDA graphs, unsafe with "
        f"batch.grad_accum={grad_accum} > 1 (pytorch/pytorch#169545, #96693)"
    )


def attention_dtype_conflict(
    attention: str, dtype: str, *, device_type: str, bf16_supported: bool = True
) -> str | None:
    """Why SDPA backend `attention` cannot run at precision `dtype` on `device_type`, or None.

    `dtype` is runtime.dtype: "auto" counts as what it resolves to (bf16 on a CUDA device with
    `bf16_supported`, else fp32, as train.run.loop.resolve_dtype does). Torch-free, so the sweeper
    drops these combinations before sampling with the same rule the trainer refuses them by; the
    trainer's SDPA probe still checks what a rule cannot see (head size, GPU generation).
    """
    if device_type != "cuda" or attention not in HALF_ONLY_CUDA_ATTENTION:
        return None
    resolved = resolve_dtype_name(dtype, device_type=device_type, bf16_supported=bf16_supported)
    if resolved != "fp32":
        return None
    runs = "runs fp32" if dtype == "fp32" else "resolves to fp32 (this GPU has no bf16)"
    return (
        f"runtime.attention={attention} has no fp32 kernel on CUDA (flash and cuDNN attention "
        f"take fp16/bf16 only) and runtime.dtype={dtype} {runs}"
    )
