"""One trial per GPU: which devices each running trial owns (pure arithmetic)."""

from __future__ import annotations


def check_capacity(*, gpus: list[int], n_jobs: int, nproc: int) -> None:
    """Refuse a sweep whose parallel trials need more GPUs than it sees."""
    if n_jobs < 1:
        raise ValueError(f"hydra.sweeper.n_jobs={n_jobs} must be >= 1; set it to 1 or more")
    if nproc < 1:
        raise ValueError(f"runtime.nproc={nproc} must be >= 1; set it to 1 or more")
    if gpus and n_jobs * nproc > len(gpus):
        raise ValueError(
            f"hydra.sweeper.n_jobs={n_jobs} x runtime.nproc={nproc} = {n_jobs * nproc} GPUs, "
            f"but {len(gpus)} are visible ({gpus}); lower n_jobs or runtime.nproc"
        )


def assign_slots(*, gpus: list[int], n_jobs: int, nproc: int) -> list[list[int]]:
    """Disjoint device sets, one per parallel trial slot: [[0, 1], [2, 3]] for 4 GPUs, 2 x 2.

    With no GPUs (a CPU sweep) every slot is empty: nothing to pin.
    """
    check_capacity(gpus=gpus, n_jobs=n_jobs, nproc=nproc)
    if not gpus:
        return [[] for _ in range(n_jobs)]
    return [list(gpus[slot * nproc : (slot + 1) * nproc]) for slot in range(n_jobs)]


def visible_devices(slot: list[int]) -> str:
    """The CUDA_VISIBLE_DEVICES value for one slot ('' leaves the environment alone)."""
    return ",".join(str(gpu) for gpu in slot)
