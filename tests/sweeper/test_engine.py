"""The sweep's bookkeeping on a real (SQLite) study: what the budget and the failure rate count
(sweeper/study/budget.py), and which point is the starting config."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweeper.settings import settings_from
from sweeper.space.constraints import SpaceContext
from sweeper.space.search_space import baseline_params, parse_space
from sweeper.study.budget import Budget
from sweeper.study.optuna_study import StudySpec, open_study

DISTS = {"mb": CategoricalDistribution([4, 8, 16])}


def told(study: optuna.Study, state: TrialState, kind: str | None = None) -> None:
    trial = study.ask(DISTS)
    if kind:
        trial.set_user_attr("failure_kind", kind)
    study.tell(trial, 1.0 if state == TrialState.COMPLETE else None, state=state)


@pytest.fixture
def study(tmp_path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # the budget asks the storage for stale trials (heartbeats: sweeper/study/optuna_study.py)
    spec = StudySpec(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="b", direction="maximize")
    s = open_study(spec)
    told(s, TrialState.COMPLETE)
    told(s, TrialState.FAIL, "excluded")
    told(s, TrialState.FAIL, "excluded")
    told(s, TrialState.FAIL, "oom")
    return s


@pytest.mark.parametrize(("sampler", "left"), [("tpe", 3), ("random", 3), ("grid", 1)])
def test_excluded_points_cost_no_budget_except_in_a_grid(study, sampler, left) -> None:
    # 5 trials: 1 complete and 1 out of memory count; the 2 excluded ran nothing (a grid's
    # budget is its list of points, refused ones included)
    budget = Budget(settings_from({"n_trials": 5, "budget.max_wall_s": 0, "sampler": sampler}))
    assert budget.trials_left(study, verify_estimate_s=0.0) == left


@pytest.mark.parametrize(
    ("extra", "exceeded"),
    [
        ([], False),  # 1 complete, 1 oom, 2 excluded: nothing failed
        ([("crash",)], False),  # 1 of 2 counted trials failed: 50%, not above it
        ([("crash",), ("timeout",)], True),  # 2 of 3
        ([("oom",), ("oom",), ("oom",)], False),  # out of memory is learning, not failing
    ],
)
def test_out_of_memory_does_not_count_toward_the_failure_rate(study, extra, exceeded) -> None:
    for (kind,) in extra:
        told(study, TrialState.FAIL, kind)
    settings = settings_from(
        {"budget.max_failure_rate": 0.5, "budget.min_trials_for_failure_rate": 1, "n_trials": 0}
    )
    assert Budget(settings).failure_rate_exceeded(study) is exceeded


BASE = {
    "batch.micro_batch": 8,
    "batch.grad_accum": 8,
    "runtime.dtype": "auto",
    "checkpoint.every_steps": 0,
    "checkpoint.mode": "sync",
    "trial.min_steps": 6,
}


@pytest.mark.parametrize(
    ("space", "base", "expected"),
    [
        ({"batch.micro_batch": "choice(4, 8)"}, {}, {"batch.micro_batch": 8}),
        ({"batch.micro_batch": "choice(4, 16)"}, {}, None),  # outside the space: no baseline
        ({"runtime.dtype": "choice(fp32, bf16)"}, {}, {"runtime.dtype": "fp32"}),  # auto, CPU
        # a starting config that never saves is measured at the first searched interval
        (
            {"checkpoint.every_steps": "choice(3, 6)", "checkpoint.mode": "choice(sync, async)"},
            {},
            {"checkpoint.every_steps": 3, "checkpoint.mode": "sync"},
        ),
        ({"checkpoint.every_steps": "choice(3, 6)"}, {"checkpoint.every_steps": 5}, None),
    ],
)
def test_baseline_params(space, base, expected) -> None:
    ctx = SpaceContext(tokens_per_step=4096, block_size=64, cpu_count=2, base={**BASE, **base})
    parsed = parse_space(space, ctx)
    assert baseline_params(parsed, ctx.base, device_type="cpu", bf16=False) == expected
