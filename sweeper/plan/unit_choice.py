"""Which runtime.compile_unit the prior gives its compiled points: `block` (regional compilation)
where the regions' host work hides behind the device's kernels, else the whole model.

A block-compiled model does the same kernels as the whole model, plus host work around every
region's call: Dynamo's guard check, AOTAutograd's forward and backward wrappers and the region's
entry. On this 2-core CPU, torch.profiler put that at 28 ms a step at 48 layers x 4 micro-batches
(REGION_HOST_S a block call, forward and backward; docs/benchmarks.md "Compile unit",
2026-11-28), the same at two widths, and the step 5.4% slower (docs/bench/
compile_unit-2026-11-28-cpu.txt): there the host is the device, so the work adds to the step.

A GPU runs its kernels asynchronously: while the host issues a micro-batch faster than the kernels
run, its issue work (the regions' share included) overlaps kernels already queued and costs the
step nothing. The rule keeps the regions' host work under HIDDEN_SHARE of the micro-batch's
predicted kernel time (sweeper/space/limits.py predict_step), so the host stays far ahead even
with the kernels' own launches on top. gpt2-xl on an H100 or H200 is well inside it (48 block
calls, ~7 ms, against 0.3-0.7 s of kernels a micro-batch); a small model's microsecond kernels
are not, and keep the whole model. A block's step on a GPU is projected from this, not measured
yet (the 9-minute sweep issue's GPU comparison); the race measures every winner with real steps.
Pure.
"""

from __future__ import annotations

from typing import Literal

CompileUnit = Literal["model", "block"]

# host seconds around one block region's forward and backward call (28 ms / (48 x 4))
REGION_HOST_S = 28e-3 / (48 * 4)
HIDDEN_SHARE = 0.1


def region_host_share(*, n_layer: int, micro_step_s: float) -> float:
    """The regions' host seconds of one micro-batch over its predicted kernel seconds."""
    if micro_step_s <= 0:
        return float("inf")
    return n_layer * REGION_HOST_S / micro_step_s


def first_unit(*, device_type: str, n_layer: int, micro_step_s: float) -> CompileUnit:
    """The compile unit a compiled point is tried with first: `block` on a GPU where the regions'
    host work is hidden (region_host_share <= HIDDEN_SHARE), else `model`."""
    if device_type != "cuda":  # the host is the device: the regions' work adds to the step
        return "model"
    share = region_host_share(n_layer=n_layer, micro_step_s=micro_step_s)
    return "block" if share <= HIDDEN_SHARE else "model"
