"""sweeper/budget.py with a fake clock: trials left, the wall budget, the verification reserve,
the ETA and the failure-rate stop, on a real (SQLite) Optuna study."""

from __future__ import annotations

import tempfile

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweeper.budget import VERIFY_SHARE, Budget
from sweeper.settings import SweepSettings
from sweeper.study import StudySpec, open_study

DISTS = {"mb": CategoricalDistribution([4, 8, 16])}


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_study(walls: list[float], kinds: tuple[str, ...] = ()) -> optuna.Study:
    """A study with a completed trial per wall time and a failed one per failure kind."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # SQLite, not in memory: the budget asks the storage for stale trials (sweeper/study.py)
    url = f"sqlite:///{tempfile.mkdtemp()}/b.db"
    study = open_study(StudySpec(storage=url, study_name="b", direction="maximize"))
    for wall in walls:
        trial = study.ask(DISTS)
        trial.set_user_attr("wall_s", wall)
        study.tell(trial, 1.0)
    for kind in kinds:
        trial = study.ask(DISTS)
        trial.set_user_attr("failure_kind", kind)
        study.tell(trial, state=TrialState.FAIL)
    return study


def budget(clock: FakeClock | None = None, **settings) -> Budget:
    return Budget(SweepSettings.from_config(settings), clock=clock or FakeClock())


@pytest.mark.parametrize(
    ("settings", "elapsed", "reserve", "left"),
    [
        ({"n_trials": 5}, 0.0, 0.0, 3),  # 2 of 5 trials spent
        ({"n_trials": 5}, 1e6, 1e6, 3),  # no wall budget: time never ends the search
        ({"n_trials": 0}, 0.0, 0.0, 10**9),  # no trial limit
        ({"n_trials": 5, "max_wall_s": 60.0}, 30.0, 29.0, 3),  # 59 s < 60 s
        ({"n_trials": 5, "max_wall_s": 60.0}, 30.0, 30.0, 0),  # the reserve reaches the budget
        ({"n_trials": 0, "max_wall_s": 60.0}, 61.0, 0.0, 0),
        ({"n_trials": 2}, 0.0, 0.0, 0),
    ],
)
def test_trials_left(settings, elapsed, reserve, left) -> None:
    clock = FakeClock()
    b = budget(clock, **settings)
    clock.now += elapsed
    assert b.trials_left(make_study([10.0, 20.0]), verify_estimate_s=reserve) == left


@pytest.mark.parametrize(
    ("settings", "walls", "real_s", "reserve"),
    [
        # median 20 s x (top 3 + the start) x 3 repeats
        ({"verify_top_k": 3, "verify_repeats": 3}, [10.0, 20.0, 30.0], 0.0, 240.0),
        # a projected search underestimates a real full-step run: the prediction is used
        ({"verify_top_k": 1, "verify_repeats": 2}, [10.0], 50.0, 200.0),
        ({"verify_top_k": 1, "verify_repeats": 1}, [], 0.0, 0.0),  # nothing measured yet
        # never more than VERIFY_SHARE of a wall budget
        ({"verify_top_k": 3, "verify_repeats": 3, "max_wall_s": 100.0}, [20.0], 0.0,
         VERIFY_SHARE * 100.0),
    ],
)  # fmt: skip
def test_verify_reserve(settings, walls, real_s, reserve) -> None:
    b = budget(**settings)
    assert b.verify_reserve_s(make_study(walls), real_s) == pytest.approx(reserve)


@pytest.mark.parametrize(
    ("settings", "elapsed", "eta"),
    [
        # 3 trials left and 2 x 2 verification runs at the median 10 s
        ({"n_trials": 5, "verify_top_k": 2, "verify_repeats": 2}, 0.0, 70.0),
        ({"n_trials": 0}, 0.0, None),  # no trial limit and no wall budget: unknown
        ({"n_trials": 0, "max_wall_s": 100.0}, 40.0, 60.0),  # the wall budget's rest
        # the wall budget ends the sweep before the trials would
        ({"n_trials": 5, "verify_top_k": 2, "verify_repeats": 2, "max_wall_s": 100.0}, 50.0,
         50.0),
        ({"n_trials": 5, "max_wall_s": 100.0}, 150.0, 0.0),  # past the budget: never negative
    ],
)  # fmt: skip
def test_eta(settings, elapsed, eta) -> None:
    clock = FakeClock()
    b = budget(clock, **settings)
    clock.now += elapsed
    assert b.eta_s(make_study([10.0, 10.0])) == eta


@pytest.mark.parametrize(
    ("max_wall_s", "elapsed", "n_runs", "fits"),
    [
        (0.0, 1e6, 10, True),  # no wall budget
        (100.0, 50.0, 5, True),  # 50 + 5 x 10 = 100: just fits
        (100.0, 51.0, 5, False),
        (100.0, 99.0, 0, True),
    ],
)
def test_a_verification_round_fits_the_wall_budget(max_wall_s, elapsed, n_runs, fits) -> None:
    clock = FakeClock()
    b = budget(clock, max_wall_s=max_wall_s)
    clock.now += elapsed
    assert b.verify_round_fits(make_study([10.0]), n_runs) is fits


def test_a_measured_verification_run_beats_the_search_median() -> None:
    """The search's median trial (60 s: compile-heavy) says no; the race's own last round
    (6 s a run) says 4 more runs fit."""
    clock = FakeClock()
    b = budget(clock, max_wall_s=100.0)
    clock.now += 70.0
    study = make_study([60.0, 60.0, 5.0])
    assert not b.verify_round_fits(study, 4)
    assert b.verify_round_fits(study, 4, run_s=6.0)
    assert not b.verify_round_fits(study, 4, run_s=8.0)  # 70 + 32 > 100


@pytest.mark.parametrize(
    ("sampler", "kinds", "spent"),
    [
        ("tpe", ("excluded", "excluded"), 2),  # excluded points ran nothing
        ("tpe", ("crash", "oom"), 4),
        ("grid", ("excluded",), 3),  # a grid's budget is its list of points
    ],
)
def test_spent(sampler, kinds, spent) -> None:
    assert budget(sampler=sampler).spent(make_study([1.0, 2.0], kinds)) == spent


@pytest.mark.parametrize(
    ("kinds", "rate", "minimum", "exceeded"),
    [
        (("crash", "crash"), 0.4, 4, True),  # 2 of 4 failed: 50% > 40%
        (("crash", "crash"), 0.5, 4, False),  # 50%, not above it
        (("crash", "crash"), 0.4, 5, False),  # too few trials to judge
        (("crash", "crash", "crash"), 0.5, 1, True),  # 3 of 5
        (("oom", "oom", "oom"), 0.0, 1, False),  # out of memory is learning, not failing
        (("excluded", "excluded", "excluded"), 0.0, 1, False),  # excluded points ran nothing
        (("timeout",), 0.0, 1, True),
    ],
)
def test_failure_rate(kinds, rate, minimum, exceeded) -> None:
    b = budget(max_failure_rate=rate, min_trials_for_failure_rate=minimum)
    assert b.failure_rate_exceeded(make_study([1.0, 2.0], kinds)) is exceeded
