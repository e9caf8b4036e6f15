"""Activation checkpointing of one transformer block: whole (`every`, `every_<k>`) or op-level
(`selective`).

Whole-block checkpointing keeps only the block's input and reruns its forward in backward: the
matmuls again, a third more compute. The selective policy (runtime.activation_checkpointing=
selective, as torchtitan's `selective` op policy) wraps every block in torch.utils.checkpoint
with `create_selective_checkpoint_contexts`: the outputs of the matmuls (aten.mm, addmm, bmm) and
of the fused attention kernels are kept from the forward, and only the cheap ops between them
(LayerNorm, GELU, residual adds, views, autocast's weight casts) rerun in backward. It drops the
LayerNorm and GELU outputs and the mid-block residual (about a third of a block's saved bytes in
fp32) for a few memory-bound pointwise passes, and redoes no matmul FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

_aten = torch.ops.aten
# Kept from the forward: the matmuls and the fused attention kernels (every output, their
# log-sum-exp included). Names a torch build lacks are skipped.
SAVED_OPS = frozenset(
    getattr(_aten, name).default
    for name in (
        "mm",
        "addmm",
        "bmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
    if hasattr(_aten, name)
)


def selective_policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    """Keep matmul and attention outputs; recompute everything else."""
    return CheckpointPolicy.MUST_SAVE if func in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def selective_contexts() -> tuple[Any, Any]:
    """A fresh (forward, recompute) context pair per checkpointed call, as checkpoint wants."""
    return create_selective_checkpoint_contexts(selective_policy)


def checkpointed(
    block: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *, selective: bool
) -> torch.Tensor:
    """block(x) under activation checkpointing: op-level selective, or the whole block."""
    if selective:
        return checkpoint(block, x, use_reentrant=False, context_fn=selective_contexts)
    return checkpoint(block, x, use_reentrant=False)
