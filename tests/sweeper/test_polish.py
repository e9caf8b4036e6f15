"""The polish step: the best trial's one-knob neighbours, as a table and inside a real search."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.search.loop import Search
from sweeper.search.polish import interleave, neighbours, point_key
from sweeper.settings import settings_from
from sweeper.space.params import Param
from sweeper.space.search_space import parse_space
from sweeper.study.optuna_study import DUPLICATE_ATTR, POLISH_ATTR
from tests.race_helpers import race_context
from tests.sweep_helpers import seeded_study, tiny_cpu_context

MB = Param(key="batch.micro_batch", kind="categorical", choices=(4, 1, 16, 8, 2, 32))
WORKERS = Param(key="data.num_workers", kind="categorical", choices=(0, 1))
COMPILE = Param(key="runtime.compile", kind="categorical", choices=("none", "default", "max"))
PIN = Param(key="data.pin_memory", kind="categorical", choices=(True, False))
LR = Param(key="optim.lr", kind="float", low=1e-4, high=1e-3)
FIXED = Param(key="runtime.dtype", kind="fixed", value="fp32")
AT = {"batch.micro_batch": 8, "data.num_workers": 1, "runtime.compile": "none"}


def moved(point: dict, base: dict = AT) -> dict:
    return {k: v for k, v in point.items() if base.get(k) != v}


@pytest.mark.parametrize(
    ("params", "incumbent", "seen", "want"),
    [
        # an ordered knob steps up, then down (sorted values, not the user's order); then swaps
        (
            (MB, WORKERS, COMPILE),
            AT,
            set(),
            [
                {"batch.micro_batch": 16},
                {"batch.micro_batch": 4},
                {"data.num_workers": 0},
                {"runtime.compile": "default"},
                {"runtime.compile": "max"},
            ],
        ),
        # measured (or queued) points are left out
        (
            (MB, WORKERS),
            AT,
            {point_key({**AT, "batch.micro_batch": 16})},
            [{"batch.micro_batch": 4}, {"data.num_workers": 0}],
        ),
        # at the end of an ordered knob there is one step only
        ((MB,), {"batch.micro_batch": 32}, set(), [{"batch.micro_batch": 16}]),
        # booleans are unordered; a continuous float and a fixed key have no neighbour
        (
            (PIN, LR, FIXED),
            {"data.pin_memory": True, "optim.lr": 3e-4, "runtime.dtype": "fp32"},
            set(),
            [{"data.pin_memory": False}],
        ),
        ((MB,), {"batch.micro_batch": 3}, set(), []),  # not a value of the knob: nothing
    ],
)
def test_neighbours(params, incumbent, seen, want) -> None:
    got = neighbours(params, incumbent, seen=seen)
    assert [moved(p, incumbent) for p in got] == want
    assert all(len(moved(p, incumbent)) == 1 for p in got)


class Hill:
    """A launcher stand-in whose tokens/s peaks at micro-batch 16 with no worker."""

    parallel = False

    def __init__(self) -> None:
        self.points: list[dict] = []

    def launch_one(self, job: list[str], *, slot: int, name: str | None = None) -> dict:
        point = dict(o.split("=", 1) for o in job if o.startswith(("batch.micro", "data.num")))
        mb, workers = int(point["batch.micro_batch"]), int(point["data.num_workers"])
        self.points.append({"mb": mb, "workers": workers})
        tps = 1000.0 - 40 * abs(mb.bit_length() - 5) - 30 * workers
        result = {"schema_version": 2, "status": "complete", "tokens_per_s": tps}
        return {"state": "complete", "result": result, "wall_s": 0.01}

    def abort(self) -> None:
        pass


def test_the_last_trials_climb_from_the_best_to_its_unmeasured_neighbours(tmp_path: Path) -> None:
    """A start at micro-batch 4 with a worker, two more trials drawn at random, then the polish
    budget: each polish trial is one knob away from one of the best three trials when it was
    queued, and the climb reaches the top of the hill."""
    settings = settings_from(
        {
            "sampler": "random",
            "n_trials": 7,
            "budget.polish_trials": 4,
            "mlflow.enabled": False,
            "seed": 11,
        }
    )
    assert settings_from({"n_trials": 14}).polish == 3  # automatic: a quarter
    assert settings_from({"n_trials": 14, "sampler": "grid"}).polish == 0
    space = parse_space(
        {"batch.micro_batch": {"split": True, "max": 32}, "data.num_workers": "choice(0, 1)"},
        tiny_cpu_context(),
    )
    # a seeded sampler: a random draw that lands on the top would leave the polish step nothing
    # to find
    study = seeded_study(tmp_path, settings.seed)
    random_draws = 2  # 7 trials: the enqueued start, 2 drawn, 4 polish
    study.enqueue_trial({"batch.micro_batch": 4, "data.num_workers": 1})
    hill = Hill()
    sweep = race_context(jobs=hill, settings=settings, study=study, space=space)
    Search(sweep, storage="unused").run()

    ran = [t for t in study.trials if DUPLICATE_ATTR not in t.user_attrs]
    assert len(ran) == 7 and len({point_key(t.params) for t in ran}) == 7
    polished = [t for t in ran if POLISH_ATTR in t.user_attrs]
    assert len(polished) == 4  # the last four of the budget
    assert [t.number for t in ran[-4:]] == [t.number for t in polished]
    for t in polished:
        parent = study.trials[t.user_attrs[POLISH_ATTR]]
        # the parent was one of the best three when its neighbours were queued
        first = min(u.number for u in polished if u.user_attrs[POLISH_ATTR] == parent.number)
        earlier = sorted((u.value for u in ran if u.number < first), reverse=True)
        assert parent.value >= earlier[min(2, len(earlier) - 1)]
        assert len(moved(t.params, parent.params)) == 1
    best = max(ran, key=lambda t: t.value)
    assert best.params == {"batch.micro_batch": 16, "data.num_workers": 0}  # the hill's top
    drawn = [t.params for t in ran[1 : 1 + random_draws]]
    assert best.params not in drawn  # the seed keeps the top out of the random draws ...
    assert POLISH_ATTR in best.user_attrs  # ... so it was the polish step that found it


def test_interleave_takes_the_lists_in_turn() -> None:
    assert interleave([["a1", "a2"], ["b1"], []], ["A", "B", "C"]) == [
        ("a1", "A"),
        ("b1", "B"),
        ("a2", "A"),
    ]
    assert interleave([], []) == []
