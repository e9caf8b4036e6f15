import pytest

from sweeper.launch.batch import JobLauncher
from sweeper.plan.gpu_slots import assign_slots, visible_devices
from sweeper.plan.plan_device import DeviceFacts
from sweeper.plan.prepare import gpu_slots_for


@pytest.mark.parametrize(
    ("gpus", "n_jobs", "nproc", "want"),
    [
        ([0, 1, 2, 3], 2, 2, [[0, 1], [2, 3]]),
        ([0, 1, 2, 3], 4, 1, [[0], [1], [2], [3]]),
        ([0, 1, 2, 3], 1, 2, [[0, 1]]),
        ([4, 5], 2, 1, [[4], [5]]),
        ([], 2, 1, [[], []]),
    ],
)
def test_slots_are_disjoint(gpus, n_jobs, nproc, want):
    slots = assign_slots(gpus=gpus, n_jobs=n_jobs, nproc=nproc)
    assert slots == want
    flat = [g for s in slots for g in s]
    assert len(flat) == len(set(flat))


def test_refuses_more_than_seen():
    with pytest.raises(ValueError, match=r"n_jobs=3 x runtime\.nproc=2"):
        assign_slots(gpus=[0, 1, 2, 3], n_jobs=3, nproc=2)


def test_visible_devices():
    assert visible_devices([2, 3]) == "2,3"


# ---- wired into the sweep: the probe's GPUs -> one CUDA_VISIBLE_DEVICES per slot -> each job ----

CUDA = DeviceFacts(
    name="NVIDIA H100 80GB HBM3",
    device_type="cuda",
    memory_gib=79.2,
    bf16_supported=True,
    cpu_count=16,
    source="probed",
)
CPU = DeviceFacts(
    name="cpu",
    device_type="cpu",
    memory_gib=None,
    bf16_supported=False,
    cpu_count=2,
    source="probed",
)


@pytest.mark.parametrize(
    ("device", "count", "env", "n_jobs", "nproc", "launcher", "want"),
    [
        (CUDA, 4, None, 2, 2, "JoblibLauncher", ["0,1", "2,3"]),
        (CUDA, 4, "4,5,6,7", 2, 2, "JoblibLauncher", ["4,5", "6,7"]),  # ids as the env names them
        (CUDA, 4, None, 4, 1, "JoblibLauncher", ["0", "1", "2", "3"]),
        (CUDA, 2, "GPU-aa,GPU-bb", 1, 2, "BasicLauncher", ["GPU-aa,GPU-bb"]),  # UUIDs
        (CUDA, 8, None, 8, 1, "SlurmLauncher", []),  # Slurm gives each task its GPUs
        (CPU, 0, None, 2, 1, "JoblibLauncher", []),  # nothing to pin on a CPU
    ],
)
def test_gpu_slots_for_a_sweep(monkeypatch, device, count, env, n_jobs, nproc, launcher, want):
    if env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    facts = {"device_count": count}
    assert gpu_slots_for(facts, device, n_jobs=n_jobs, nproc=nproc, launcher=launcher) == want


def test_a_sweep_needing_more_gpus_than_it_sees_is_refused(monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(ValueError, match=r"n_jobs=3 x runtime\.nproc=2"):
        gpu_slots_for({"device_count": 4}, CUDA, n_jobs=3, nproc=2, launcher="JoblibLauncher")


class Recorder:
    """Hydra's launcher as the sweep sees it: records each job's overrides, returns a result."""

    def __init__(self) -> None:
        self.jobs: list[list[str]] = []

    def launch(self, batch, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        self.jobs += [list(job) for job in batch]
        ret = JobReturn()
        ret.status, ret.return_value = JobStatus.COMPLETED, {"state": "complete"}
        return [ret]


def test_each_job_carries_its_slots_devices_and_hydra_reads_them_back() -> None:
    from hydra import compose, initialize_config_dir

    import train.core.config  # noqa: F401  (registers `train_schema`)
    from tests.conftest import CONF_DIR

    rec = Recorder()
    jobs = JobLauncher(rec, slots=["0,1", "2,3"])
    assert jobs.launch_one(["x=1"], slot=1) == {"state": "complete"}
    jobs.launch([["y=2"]])  # the race's one-at-a-time runs: the first slot
    (first, second) = rec.jobs
    assert first[-1] == "++hydra.job.env_set.CUDA_VISIBLE_DEVICES='2,3'"
    assert second[-1] == "++hydra.job.env_set.CUDA_VISIBLE_DEVICES='0,1'"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("sweep", overrides=[first[-1]], return_hydra_config=True)
    assert cfg.hydra.job.env_set.CUDA_VISIBLE_DEVICES == "2,3"  # one string, not a sweep of two
