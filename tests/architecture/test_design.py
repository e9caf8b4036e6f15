"""sweeper/search/design.py: TPE's startup points spread over every parameter's range."""

from __future__ import annotations

import math

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from sweeper.search.design import latin_design

SPLIT = CategoricalDistribution([1, 2, 4, 8, 16, 32])  # the micro-batch split, smallest first


@pytest.mark.parametrize(
    ("n", "strata"),
    [
        (2, [{1, 2, 4}, {8, 16, 32}]),
        (3, [{1, 2}, {4, 8}, {16, 32}]),
        (6, [{1}, {2}, {4}, {8}, {16}, {32}]),  # every choice once
    ],
)
@pytest.mark.parametrize("seed", range(4))
def test_an_ordered_choice_is_covered_stratum_by_stratum(n, strata, seed):
    points = latin_design({"mb": SPLIT}, n, seed=seed)
    assert sorted(sum(p["mb"] in stratum for p in points) for stratum in strata) == [1] * n


@pytest.mark.parametrize("seed", range(5))
def test_every_column_uses_each_stratum_once(seed):
    dists = {
        "mb": SPLIT,
        "workers": IntDistribution(0, 3),
        "lr": FloatDistribution(1e-5, 1e-1, log=True),
        "threads": CategoricalDistribution([1, 2]),
    }
    points = latin_design(dists, 4, seed=seed)
    assert len(points) == 4
    assert sorted(p["workers"] for p in points) == [0, 1, 2, 3]
    # one learning rate per decade-wide log stratum
    assert sorted(int(math.log10(p["lr"]) + 5) for p in points) == [0, 1, 2, 3]
    assert sorted(p["threads"] for p in points) == [1, 1, 2, 2]


def test_refused_and_repeated_points_are_replaced_when_possible():
    dists = {"mb": SPLIT, "threads": CategoricalDistribution([1, 2])}
    points = latin_design(dists, 3, seed=1, accept=lambda p: p["threads"] == 2)
    assert len(points) == 3
    assert all(p["threads"] == 2 for p in points)
    assert len({p["mb"] for p in points}) == 3


def test_a_space_smaller_than_n_yields_each_point_once():
    points = latin_design({"t": CategoricalDistribution([1, 2])}, 5, seed=0)
    assert sorted(p["t"] for p in points) == [1, 2]


def test_the_design_is_reproducible_per_seed():
    dists = {"mb": SPLIT, "lr": FloatDistribution(1e-4, 1e-2, log=True)}
    assert latin_design(dists, 3, seed=7) == latin_design(dists, 3, seed=7)
    assert latin_design(dists, 0, seed=7) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        latin_design(dists, -1, seed=7)


@pytest.mark.parametrize(
    ("baseline", "n_trials", "queued"),
    [
        ({"batch.micro_batch": 8, "runtime.threads": 2}, 20, 3),  # 4 startup: baseline + 3
        (None, 20, 4),
        ({"batch.micro_batch": 8, "runtime.threads": 2}, 2, 1),  # never past the budget
    ],
)
def test_a_fresh_tpe_study_queues_the_design_once(baseline, n_trials, queued):
    import optuna

    from sweeper.settings import settings_from
    from sweeper.space.constraints import SpaceContext
    from sweeper.space.search_space import parse_space
    from sweeper.start import DESIGN_ATTR, queue_design

    ctx = SpaceContext(tokens_per_step=4096, block_size=64, cpu_count=2, device_type="cpu")
    space = parse_space(
        {"batch.micro_batch": {"split": True, "max": 32}, "runtime.threads": "choice(1, 2)"}, ctx
    )
    settings = settings_from({"n_startup_trials": 4, "n_trials": n_trials, "seed": 3})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    if baseline is not None:
        study.enqueue_trial(baseline, user_attrs={"baseline": True})
    queue_design(study, space, baseline, settings)
    queue_design(study, space, baseline, settings)  # a second start (or worker) adds nothing
    # queued (WAITING) trials hold their point as Optuna's fixed params until asked
    design = [t.system_attrs["fixed_params"] for t in study.trials if t.user_attrs.get(DESIGN_ATTR)]
    assert len(design) == queued
    assert all(p != baseline for p in design)
    assert all(space.check(p) is None for p in design)
    assert len({tuple(sorted(p.items())) for p in design}) == queued
