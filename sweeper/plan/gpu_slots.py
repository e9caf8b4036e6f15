"""One trial per GPU: which devices each running trial owns (pure arithmetic).

A sweep with a local parallel launcher (Hydra's basic or joblib launcher, `hydra.sweeper.n_jobs`
trials at once) gives each running trial `runtime.nproc` GPUs of its own through the job's
`hydra.job.env_set.CUDA_VISIBLE_DEVICES` (sweeper/launch/batch.py): never two trials on one GPU.
On Slurm (submitit) the scheduler gives each task its GPUs and nothing is pinned here.
"""

from __future__ import annotations


def visible_gpus(cuda_visible_devices: str | None, count: int) -> list[str]:
    """The GPU ids this process may hand out: CUDA_VISIBLE_DEVICES's entries (ids or UUIDs) when
    it is set, else 0..count-1 (`count`: the devices torch sees)."""
    if cuda_visible_devices is None:
        return [str(i) for i in range(count)]
    ids = [d.strip() for d in cuda_visible_devices.split(",") if d.strip()]
    return ids[:count]


def check_capacity(*, gpus: list, n_jobs: int, nproc: int) -> None:
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


def assign_slots(*, gpus: list, n_jobs: int, nproc: int) -> list[list]:
    """Disjoint device sets, one per parallel trial slot: [[0, 1], [2, 3]] for 4 GPUs, 2 x 2.

    With no GPUs (a CPU sweep) every slot is empty: nothing to pin.
    """
    check_capacity(gpus=gpus, n_jobs=n_jobs, nproc=nproc)
    if not gpus:
        return [[] for _ in range(n_jobs)]
    return [list(gpus[slot * nproc : (slot + 1) * nproc]) for slot in range(n_jobs)]


def visible_devices(slot: list) -> str:
    """The CUDA_VISIBLE_DEVICES value for one slot ('' leaves the environment alone)."""
    return ",".join(str(gpu) for gpu in slot)
