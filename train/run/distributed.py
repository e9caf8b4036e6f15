"""Data-parallel runs: the process group, DDP, and what every rank must agree on.

Under torchrun (`torch.distributed.run`, started by train/run/torchrun.py when runtime.nproc > 1)
each process trains one DistributedDataParallel replica: NCCL on CUDA, one GPU per process
(cuda:LOCAL_RANK), gloo on a CPU. Each rank reads its own slice of every global batch
(train/data/dataset.py), DDP averages the gradients, and rank 0 alone writes results and
checkpoints. A collective that waits longer than `ddp.timeout_s` raises, so a hung or dead peer
ends the run with a reason.

Exposed communication: DDP overlaps each bucket's all-reduce with the rest of the backward, so
the time a step loses to communication is what is left after the last bucket is ready, which is
when the last gradient has been accumulated. `ExposedComms` marks that moment on the step's clock
(a host time on a CPU, a CUDA event on the compute stream on a GPU) from a hook on each
parameter's gradient accumulation, and the trainer charges the rest of the backward to the
`comms` phase (train/core/meters.py `carve`). DDP keeps its own C++ all-reduce: a Python comm
hook's future callback is released on gloo's worker thread, which then needs the GIL, and a
DDP model freed after its process group deadlocked there (the process group's destructor, GIL
held, joined that worker).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from train.core.config import DdpConfig


@dataclass(frozen=True, kw_only=True)
class Rank:
    """This process's place in the run (torchrun's RANK, LOCAL_RANK and WORLD_SIZE)."""

    rank: int = 0
    local_rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes results, checkpoints and progress."""
        return self.rank == 0


def current_rank(env: dict[str, str] | None = None) -> Rank:
    """The rank torchrun gave this process, or a single process's rank 0 of 1."""
    env = dict(os.environ) if env is None else env
    world = int(env.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Rank()
    return Rank(rank=int(env["RANK"]), local_rank=int(env.get("LOCAL_RANK", "0")), world=world)


def backend_for(device_type: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device_type == "cuda" else "gloo"


def rank_device_name(requested: str, rank: Rank, *, cuda_available: bool) -> str:
    """runtime.device for this rank: one GPU per process (cuda:LOCAL_RANK) when data-parallel on
    CUDA. A fixed cuda:N would put every rank on one GPU, so it is refused with world > 1."""
    if rank.world == 1 or requested == "cpu" or (requested == "auto" and not cuda_available):
        return requested
    if requested in ("auto", "cuda"):
        return f"cuda:{rank.local_rank}"
    raise ValueError(
        f"runtime.device={requested} with {rank.world} processes would put every rank on one "
        f"GPU; use runtime.device=auto (each process takes cuda:LOCAL_RANK of the GPUs "
        f"CUDA_VISIBLE_DEVICES shows)"
    )


def init_process_group(rank: Rank, *, device: torch.device, timeout_s: float) -> None:
    """Join the run's process group (torchrun's rendezvous, read from the environment)."""
    if rank.world == 1 or dist.is_initialized():
        return
    extra: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(
        backend=backend_for(device.type), timeout=timedelta(seconds=timeout_s), **extra
    )


def barrier(rank: Rank) -> None:
    """Every rank waits here until all have arrived (nothing to wait for in one process)."""
    if rank.world > 1 and dist.is_initialized():
        dist.barrier()


def destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class ExposedComms:
    """Marks, on the armed clock, when each parameter's gradient of a backward is accumulated.

    `arm(clock)` after the forward of the micro-batch whose backward all-reduces (hooks on the
    parameters for that backward only; the compiled forward never sees them); the latest mark
    (the last gradient's, which completes DDP's last bucket) is kept; `carve()` after the
    backward removes the hooks, splits the clock's latest span there and charges the rest to
    `comms`. Unarmed, nothing is hooked and DDP all-reduces as it always does.
    """

    def __init__(self, params: Iterable[nn.Parameter]) -> None:
        self._params = [p for p in params if p.requires_grad]
        self._handles: list[Any] = []
        self._clock: Any = None
        self._mark: Any = None
        self.grads = 0  # gradients accumulated in the armed backward

    def arm(self, clock: Any) -> None:
        self._remove_hooks()
        self._clock, self._mark, self.grads = clock, None, 0
        self._handles = [p.register_post_accumulate_grad_hook(self._ready) for p in self._params]

    def _ready(self, _param: nn.Parameter) -> None:
        mark = self._clock.mark()
        if self._mark is not None:
            self._clock.discard(self._mark)
        self._mark, self.grads = mark, self.grads + 1

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def carve(self) -> None:
        """Charge the armed backward's time after its last gradient was ready to `comms`."""
        self._remove_hooks()
        clock, mark = self._clock, self._mark
        self._clock = self._mark = None
        if clock is not None and mark is not None:
            clock.carve(mark, into="comms")


def wrap_ddp(model: nn.Module, *, device: torch.device, cfg: DdpConfig) -> nn.Module:
    """`model` (or its torch.compile wrapper) as a DDP replica with the ddp.* knobs; DDP's own
    all-reduce averages the gradients over the ranks."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb,
        gradient_as_bucket_view=cfg.gradient_as_bucket_view,
        static_graph=cfg.static_graph,
    )


def no_sync(model: nn.Module, sync: bool) -> AbstractContextManager[Any]:
    """DDP's no_sync() for a micro-batch that only accumulates (sync False), else nothing."""
    if sync or not hasattr(model, "no_sync"):
        return nullcontext()
    return model.no_sync()


def mean_over_ranks(value: torch.Tensor, rank: Rank) -> torch.Tensor:
    """The mean of a tensor over the ranks (each rank's loss is over its own slice)."""
    if rank.world == 1:
        return value
    total = value.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total / rank.world


def any_rank(flag: bool, rank: Rank, device: torch.device) -> bool:
    """True on every rank if `flag` is true on any: loop decisions (stop, prune) taken from one
    rank's clock or study must be taken by all, or the others wait forever in the next step."""
    if rank.world == 1:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def from_main(value: float, rank: Rank, device: torch.device) -> float:
    """Rank 0's value on every rank (a decision made from rank 0's measurement)."""
    if rank.world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return float(t.item())
