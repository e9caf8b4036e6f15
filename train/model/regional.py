"""torch.compile of a GPT, whole or region by region (runtime.compile_unit).

`model`: `torch.compile(model)`, one graph of the whole forward and backward, as nanoGPT does. Its
cold compile grows with the depth: Dynamo traces, and Inductor lowers and schedules, every block.

`block`: regional compilation (PyTorch's recipe "Reducing torch.compile cold start compilation
time with regional compilation"; torchtitan compiles each transformer block the same way, and its
loss apart). Every block of the model runs through one function, `train.model.gpt.run_block`, and
that function is compiled once: a block is the same code over other weights, and the weights are
graph inputs (Dynamo inlines built-in nn.Modules since torch 2.5), so the guards of block 1's graph
pass for blocks 2..n and no block recompiles. Activation checkpointing runs inside that function,
so Dynamo traces it as part of the graph (selective recompute's policy included) and the
partitioner decides the recompute, as torchtitan composes recompute and compile. The head (final
LayerNorm, LM head, loss: `run_head`) is a second compiled region; the embeddings run eager. A
block that is recomputed and one that is not are two graphs (runtime.activation_checkpointing=
every_<k>), each compiled once.

The trade (measured on a CPU: docs/bench/compile_unit-2026-11-2{7,8,9}-cpu.txt): a cold compile that
no longer grows with the depth, for a slower step, since each region's call costs its guards and
autograd wrappers and no fusion crosses a block's edge: a fixed host cost per block call, which a
wider block or a device that runs kernels asynchronously hides, and which adds to the step where the
host is the device (5% on this CPU on 2026-11-27, 16% on 2026-11-29, when its host ran everything
3.3x slower). Fewer, larger regions pay it fewer times but compile more blocks each: one region of
all the blocks steps as the whole model does, and none between gave both a 3x faster compile and a
step within 3% here (scripts/bench/region_size.py, docs/benchmarks.md "Region size").

float8 (train/model/float8.py) swaps the blocks' linears before either unit compiles, so the block
graph traces torchao's Float8Linear as the whole-model graph does. Under DDP the compiled regions
run inside the DDP wrapper, as the compiled whole model does, and Dynamo's DDP optimizer
(torch._dynamo.config.optimize_ddp) splits a region's graph at the gradient buckets as it splits
the whole model's, so all-reduces still start while backward runs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from train.core.rules import check_compile_unit
from train.model.gpt import GPT, run_block, run_head


def compile_mode(mode: str) -> str | None:
    """runtime.compile's mode as torch.compile takes it (`default` is torch's None)."""
    return None if mode == "default" else mode


def compile_model(model: GPT, *, mode: str, unit: str) -> nn.Module:
    """The module to call under runtime.compile=`mode` (not none) and runtime.compile_unit=`unit`:
    the compiled wrapper of the whole model, or `model` itself with its regions compiled."""
    check_compile_unit(unit)
    if unit == "model":
        return torch.compile(model, mode=compile_mode(mode))
    compile_regions(model, mode=mode)
    return model


def compile_regions(model: GPT, *, mode: str) -> None:
    """Compile `model`'s block and head functions in place: its parameters, state dict and
    module names stay as they were (a checkpoint saved either way loads either way)."""
    options: dict[str, Any] = {"mode": compile_mode(mode)}
    model.block_fn = torch.compile(run_block, **options)
    model.head_fn = torch.compile(run_head, **options)
