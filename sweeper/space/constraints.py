"""Which points of a space are safe to run: the rules a trial's config must obey, checked before
it launches.

`check_point` refuses a point (merged over the sweep's base config) with a reason naming the
knob: a batch split that changes the tokens per step, a device this machine lacks, a precision
or kernel the device cannot run, CUDA graphs with gradient accumulation, more data workers than
CPUs, a checkpoint interval the measured window may never reach, and the memory rules
(sweeper/space/memory.py). The rules the trainer also enforces are the trainer's own torch-free
functions (train.core.config), never copies of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from train.core.keys import (
    ATTENTION,
    BLOCK_SIZE,
    CHECKPOINT_EVERY,
    COMPILE,
    DEVICE,
    DTYPE,
    FLOAT8,
    FLOAT8_EMULATE,
    GRAD_ACCUM,
    MICRO_BATCH,
    TOKENS_PER_STEP,
    TRIAL_MIN_STEPS,
    WORKERS,
)
from train.core.rules import (
    Refusal,
    attention_dtype_conflict,
    cudagraph_conflict,
    dtype_unsupported,
    flash_impl_unsupported,
    float8_unsupported,
    grad_accum_for,
)

if TYPE_CHECKING:
    from sweeper.space.memory import OutOfMemory

# PyTorch's CPU SDPA has only the flash and math kernels (train.model.attention probes this).
CUDA_ONLY_ATTENTION = ("efficient", "cudnn")
# keys whose values the device may lack
DEVICE_BOUND = (DTYPE, ATTENTION, FLOAT8)


def cpus_here() -> int:
    """CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(kw_only=True)
class SpaceContext:
    """What the constraints depend on: the pinned batch, the machine and the composed config."""

    tokens_per_step: int  # tokens per optimizer step, all processes together (pinned)
    block_size: int  # sequence length of the model being swept
    world_size: int = 1  # processes taking part in one optimizer step
    # CPUs this process may use (bounds data workers)
    cpu_count: int = field(default_factory=cpus_here)
    device_type: str = "cpu"  # the resolved device: cpu | cuda
    bf16_supported: bool = False  # whether the CUDA device has bf16
    base: dict[str, Any] = field(default_factory=dict)  # flat dotted key -> trainer config value
    device_name: str = ""  # as torch names it (or a plan device); for messages and peaks
    # total device memory; None = no memory-model refusals (a CPU, unless a plan device is named)
    device_memory_gib: float | None = None
    # the CUDA device's compute capability (runtime.float8 needs >= 8.9); None: a CPU or unknown
    cuda_capability: tuple[int, int] | None = None
    # runtime.attention's flash implementations installed where trials run (train/proc/probe.py);
    # None: not known (a plan device), so not refused
    flash_attention_impls: tuple[str, ...] | None = None
    # whether torchao is installed where trials run (runtime.float8); None: ask this machine
    torchao: bool | None = None
    # trials of this sweep that ran out of memory (sweeper/space/memory.py); added by note_ooms
    ooms: tuple[OutOfMemory, ...] = ()
    # the space's runtime.activation_checkpointing choices (empty: not searched): a point that
    # recomputes more than one of them that fits is dominated (sweeper/space/dominance.py)
    recompute_choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        self.ooms = tuple(self.ooms)
        for name in ("tokens_per_step", "block_size", "world_size", "cpu_count"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SpaceContext.{name} must be a positive integer, got {value!r}")
        if self.device_type not in ("cpu", "cuda"):
            raise ValueError(
                f"SpaceContext.device_type must be cpu or cuda, got {self.device_type!r}"
            )

    def note_ooms(self, ooms: Iterable[OutOfMemory]) -> None:
        """Trials that ran out of memory: from now on check_point refuses what they rule out
        (a micro-batch at least as large with the same other knobs)."""
        self.ooms = (*self.ooms, *ooms)


def derive_grad_accum(micro_batch: Any, point: Mapping[str, Any], ctx: SpaceContext) -> int | None:
    """grad_accum that keeps the tokens per step for this micro_batch, or None if none does."""
    return grad_accum_for(
        micro_batch,
        tokens_per_step=point.get(TOKENS_PER_STEP, ctx.tokens_per_step),
        block_size=point.get(BLOCK_SIZE, ctx.block_size),
        world=ctx.world_size,
    )


def unsupported_here(
    key: str, value: Any, *, device_type: str, ctx: SpaceContext
) -> Refusal | None:
    """Why `key=value` cannot run on this device whatever the other knobs are, or None."""
    if key == DTYPE:
        return dtype_unsupported(value, device_type=device_type, bf16_supported=ctx.bf16_supported)
    if key == ATTENTION and device_type == "cpu" and value in CUDA_ONLY_ATTENTION:
        return Refusal(key=key, value=value, reason="has no CPU kernel")
    if key == ATTENTION:
        return flash_impl_unsupported(
            str(value), device_type=device_type, installed=ctx.flash_attention_impls
        )
    if key == FLOAT8:  # the device's part of the rule: dtype is checked per point
        return float8_unsupported(
            str(value or "none"),
            dtype="bf16",
            device_type=device_type,
            capability=ctx.cuda_capability,
            emulate=bool(ctx.base.get(FLOAT8_EMULATE, False)),
            torchao=ctx.torchao,
        )
    return None


def check_point(
    point: Mapping[str, Any], ctx: SpaceContext, *, memory: bool = True, dominance: bool = False
) -> str | None:
    """Why this point (merged over ctx.base) is invalid or unsafe, or None when it is fine.

    memory=False leaves out the memory rules (the memory model and this sweep's out-of-memory
    trials), to count what they drop among the otherwise feasible points. dominance=True also
    refuses a point that fits but cannot win (sweeper/space/dominance.py): the question the
    search asks (SearchSpace.check), not whether a point can run (the guard's nearest fit).
    """
    full = {**ctx.base, **point}
    if MICRO_BATCH in point and GRAD_ACCUM not in point:
        full[GRAD_ACCUM] = derive_grad_accum(point[MICRO_BATCH], point, ctx)
    mb, accum = full.get(MICRO_BATCH), full.get(GRAD_ACCUM)
    # The context is the authority for the pinned batch unless the point itself changes it.
    tokens = point.get(TOKENS_PER_STEP, ctx.tokens_per_step)
    block = point.get(BLOCK_SIZE, ctx.block_size)
    ints = isinstance(mb, int) and isinstance(accum, int)
    if MICRO_BATCH in full and (not ints or mb * accum * block * ctx.world_size != tokens):
        return (
            f"invalid split: batch.micro_batch={mb} x batch.grad_accum={accum} x "
            f"model.block_size={block} x world={ctx.world_size} != "
            f"batch.tokens_per_step={tokens}"
        )
    device = str(full.get(DEVICE, "auto"))
    if device.startswith("cuda") and ctx.device_type != "cuda":
        return f"runtime.device={device} but this machine has no CUDA device"
    device_type = "cpu" if device == "cpu" else ctx.device_type
    refusal = cudagraph_conflict(full.get(COMPILE), accum, device_type=device_type)
    if refusal is not None:
        return str(refusal)
    for key in DEVICE_BOUND:
        refusal = unsupported_here(key, full.get(key), device_type=device_type, ctx=ctx)
        if refusal is not None:
            return str(refusal)
    refusal = attention_dtype_conflict(
        str(full.get(ATTENTION, "auto")),
        str(full.get(DTYPE, "auto")),
        device_type=device_type,
        bf16_supported=ctx.bf16_supported,
    )
    if refusal is not None:
        return str(refusal)
    refusal = float8_unsupported(
        str(full.get(FLOAT8) or "none"),
        dtype=str(full.get(DTYPE, "auto")),
        device_type=device_type,
        capability=ctx.cuda_capability,
        emulate=bool(full.get(FLOAT8_EMULATE, False)),
        bf16_supported=ctx.bf16_supported,
        torchao=ctx.torchao,
    )
    if refusal is not None:
        return str(refusal)
    workers = full.get(WORKERS)
    if isinstance(workers, int) and workers > ctx.cpu_count:
        return f"data.num_workers={workers} exceeds the {ctx.cpu_count} CPUs here"
    every, min_steps = full.get(CHECKPOINT_EVERY), full.get(TRIAL_MIN_STEPS)
    if isinstance(every, int) and isinstance(min_steps, int) and every > min_steps:
        # the window may stop at min_steps: a longer interval leaves the save unmeasured
        return (
            f"checkpoint.every_steps={every} > trial.min_steps={min_steps}: the measured "
            f"window may end before the first save; use an interval <= {min_steps} "
            "(hydra.sweeper.cost.planned_checkpoint_every prices saves at the production "
            "interval)"
        )
    if memory and device_type == ctx.device_type:
        return _memory_refusal(full, ctx, dominance=dominance)
    return None


def _memory_refusal(full: Mapping[str, Any], ctx: SpaceContext, *, dominance: bool) -> str | None:
    """The memory rules (sweeper/space/memory.py): an earlier out-of-memory trial, the memory
    model."""
    from sweeper.space.memory import memory_reason, oom_reason

    if ctx.ooms:
        reason = oom_reason(full, ctx.ooms, device_type=ctx.device_type)
        if reason is not None:
            return reason
    if ctx.device_memory_gib is None:
        return None
    reason = memory_reason(
        full,
        device_type=ctx.device_type,
        bf16_supported=ctx.bf16_supported,
        device_gib=ctx.device_memory_gib,
        device_name=ctx.device_name,
    )
    if reason is not None or not dominance:
        return reason
    return dominated_reason(full, ctx)


def fits_here(full: Mapping[str, Any], ctx: SpaceContext) -> bool:
    """Whether the memory rules let `full` run: no out-of-memory trial rules it out and the
    memory model (where the device's memory is known) predicts it fits."""
    return _memory_refusal(full, ctx, dominance=False) is None


def cheaper_recompute(full: Mapping[str, Any], ctx: SpaceContext) -> Any | None:
    """The space's cheaper runtime.activation_checkpointing choice that fits at `full`'s
    micro-batch (sweeper/space/dominance.py), or None: `full` is not dominated. Only where the
    memory model knows the device: without it, nothing says the cheaper point fits."""
    from sweeper.space.dominance import cheaper_that_fits

    if not ctx.recompute_choices or ctx.device_memory_gib is None:
        return None
    return cheaper_that_fits(full, ctx.recompute_choices, fits=lambda c: fits_here(c, ctx))


def dominated_reason(full: Mapping[str, Any], ctx: SpaceContext) -> str | None:
    """Why `full` cannot win, or None."""
    from sweeper.space.dominance import dominated_text

    cheaper = cheaper_recompute(full, ctx)
    return None if cheaper is None else dominated_text(full, cheaper)
