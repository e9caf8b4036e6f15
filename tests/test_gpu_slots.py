import pytest

from sweeper.gpu_slots import assign_slots, visible_devices


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
