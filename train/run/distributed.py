"""Data-parallel runs: the process group, DDP, and what every rank must agree on.

Under torchrun (`torch.distributed.run`, started by train/run/torchrun.py when runtime.nproc > 1)
each process trains one DistributedDataParallel replica: NCCL on CUDA, one GPU per process
(cuda:LOCAL_RANK), gloo on a CPU. Each rank reads its own slice of every global batch
(train/data/dataset.py), DDP averages the gradients, and rank 0 alone writes results and
checkpoints. A collective that waits longer than `ddp.timeout_s` raises, so a hung or dead peer
ends the run with a reason.

Exposed communication: DDP overlaps each bucket's all-reduce with the rest of the backward, so
the time a step loses to communication is what is left after the last bucket is ready. The comm
hook (`ExposedComms.hook`, DDP's own all-reduce hook with a mark before it) marks that moment on
the step's clock (a host time on a CPU, a CUDA event on the compute stream on a GPU), and the
trainer charges the rest of the backward to the `comms` phase (train/core/meters.py `carve`).
"""

from __future__ import annotations

import os
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
    """The DDP comm hook that marks when each gradient bucket is ready on the armed clock.

    `arm(clock)` before the micro-batch whose backward all-reduces; the hook keeps the latest
    mark (the last bucket's); `carve()` after the backward splits the clock's latest span there
    and charges the rest to `comms`. Outside an armed micro-batch the hook only all-reduces.
    """

    def __init__(self) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self._allreduce = default_hooks.allreduce_hook  # looked up once, not per bucket
        self._clock: Any = None
        self._mark: Any = None
        self.buckets = 0  # buckets seen in the armed micro-batch

    def arm(self, clock: Any) -> None:
        self._clock, self._mark, self.buckets = clock, None, 0

    def hook(self, state, bucket):
        """Mark the bucket ready, then DDP's default all-reduce (averaged over the ranks)."""
        if self._clock is not None:
            mark = self._clock.mark()
            if self._mark is not None:
                self._clock.discard(self._mark)
            self._mark, self.buckets = mark, self.buckets + 1
        return self._allreduce(state, bucket)

    def carve(self) -> None:
        """Charge the armed micro-batch's time after its last bucket was ready to `comms`."""
        clock, mark = self._clock, self._mark
        self._clock = self._mark = None
        if clock is not None and mark is not None:
            clock.carve(mark, into="comms")


def wrap_ddp(
    model: nn.Module, *, device: torch.device, cfg: DdpConfig, comms: ExposedComms
) -> nn.Module:
    """`model` (or its torch.compile wrapper) as a DDP replica with the ddp.* knobs and the
    timing comm hook (DDP's own all-reduce, averaged over the ranks)."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb,
        gradient_as_bucket_view=cfg.gradient_as_bucket_view,
        static_graph=cfg.static_graph,
    )
    ddp.register_comm_hook(None, comms.hook)
    return ddp


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
