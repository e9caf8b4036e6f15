"""sweeper/study/budget.py with a fake clock: trials left, the wall budget, the verification
reserve, the ETA and the failure-rate stop, on a real (SQLite) Optuna study; and real sweeps whose
budget ends the search: the line that says so, the exit code, and no trial left waiting."""

from __future__ import annotations

import tempfile

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweeper.settings import settings_from
from sweeper.study.budget import (
    TRIALS,
    VERIFY_SHARE,
    WALL,
    Budget,
    resume_line,
    wall_budget_error,
)
from sweeper.study.optuna_study import (
    REQUEUED_ATTR,
    UNRUN,
    StudySpec,
    count_finished,
    fail_waiting,
    open_study,
    planned_params,
    requeue_unrun,
)
from tests.sweep_helpers import load_study, run_sweep

DISTS = {"mb": CategoricalDistribution([4, 8, 16])}


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_study(walls: list[float], kinds: tuple[str, ...] = ()) -> optuna.Study:
    """A study with a completed trial per wall time and a failed one per failure kind."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # SQLite, not in memory: the budget asks the storage for stale trials
    # (sweeper/study/optuna_study.py)
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
    return Budget(settings_from(settings), clock=clock or FakeClock())


@pytest.mark.parametrize(
    ("settings", "elapsed", "reserve", "left"),
    [
        ({"n_trials": 5}, 0.0, 0.0, 3),  # 2 of 5 trials spent
        ({"n_trials": 5}, 1e6, 1e6, 3),  # no wall budget: time never ends the search
        ({"n_trials": 0}, 0.0, 0.0, 10**9),  # no trial limit
        ({"n_trials": 5, "budget.max_wall_s": 60.0}, 30.0, 29.0, 3),  # 59 s < 60 s
        ({"n_trials": 5, "budget.max_wall_s": 60.0}, 30.0, 30.0, 0),  # the reserve reaches it
        ({"n_trials": 0, "budget.max_wall_s": 60.0}, 61.0, 0.0, 0),
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
        ({"verify.top_k": 3, "verify.repeats": 3}, [10.0, 20.0, 30.0], 0.0, 240.0),
        # a projected search underestimates a real full-step run: the prediction is used
        ({"verify.top_k": 1, "verify.repeats": 2}, [10.0], 50.0, 200.0),
        ({"verify.top_k": 1, "verify.repeats": 1}, [], 0.0, 0.0),  # nothing measured yet
        # never more than VERIFY_SHARE of a wall budget
        (
            {"verify.top_k": 3, "verify.repeats": 3, "budget.max_wall_s": 100.0},
            [20.0],
            0.0,
            VERIFY_SHARE * 100.0,
        ),
    ],
)
def test_verify_reserve(settings, walls, real_s, reserve) -> None:
    b = budget(**settings)
    assert b.verify_reserve_s(make_study(walls), real_s) == pytest.approx(reserve)


@pytest.mark.parametrize(
    ("settings", "elapsed", "eta"),
    [
        # 3 trials left and the race: the top 2 (this study has no starting config), 2 rounds,
        # at the median 10 s (sweeper/study/eta.py; tests/sweeper/test_eta.py has the start's runs)
        ({"n_trials": 5, "verify.top_k": 2, "verify.repeats": 2}, 0.0, 70.0),
        ({"n_trials": 0}, 0.0, None),  # no trial limit and no wall budget: unknown
        ({"n_trials": 0, "budget.max_wall_s": 100.0}, 40.0, 60.0),  # the wall budget's rest
        # the wall budget ends the sweep before the trials would
        (
            {"n_trials": 5, "verify.top_k": 2, "verify.repeats": 2, "budget.max_wall_s": 100.0},
            50.0,
            50.0,
        ),
        # past the budget: the race's first round (the top 3 and the start) still runs
        ({"n_trials": 5, "budget.max_wall_s": 100.0}, 150.0, 40.0),
    ],
)
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
    b = budget(clock, **{"budget.max_wall_s": max_wall_s})
    clock.now += elapsed
    assert b.verify_round_fits(make_study([10.0]), n_runs) is fits


def test_a_measured_verification_run_beats_the_search_median() -> None:
    """The search's median trial (60 s: compile-heavy) says no; the race's own last round
    (6 s a run) says 4 more runs fit."""
    clock = FakeClock()
    b = budget(clock, **{"budget.max_wall_s": 100.0})
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
    b = budget(**{"budget.max_failure_rate": rate, "budget.min_trials_for_failure_rate": minimum})
    assert b.failure_rate_exceeded(make_study([1.0, 2.0], kinds)) is exceeded


# ---- a budget explains itself (issue 19) -------------------------------------------------------


@pytest.mark.parametrize(
    ("max_wall_s", "setting", "quickest", "refused"),
    [
        (0.0, "budget.max_wall_s", 10.0, None),  # no wall budget
        (12.0, "budget.max_wall_s", 10.0, None),  # one trial fits
        (5.0, "budget.max_wall_s", None, None),  # no prediction: nothing to refuse on
        (5.0, "budget.max_wall_s", 10.0, "hydra.sweeper.budget.max_wall_s=5 s cannot hold one"),
        (300.0, "budget.cpu_max_wall_s", 400.0, "hydra.sweeper.budget.cpu_max_wall_s=300 s cannot"),
    ],
)
def test_a_wall_budget_below_one_predicted_trial_is_refused(
    max_wall_s, setting, quickest, refused
) -> None:
    error = wall_budget_error(
        max_wall_s=max_wall_s, setting=setting, quickest_s=quickest, overhead_s=15.0
    )
    if refused is None:
        assert error is None
        return
    assert error.startswith(refused)
    assert f"predicted to take {quickest:.1f} s" in error
    assert f"at least {15 + 2 * quickest:.0f} s" in error  # one trial and its verification run


def test_the_search_end_names_the_budget_what_it_allowed_and_one_trial() -> None:
    clock = FakeClock()
    study = make_study([10.0, 14.0, 12.0])
    walled = Budget(
        settings_from({"n_trials": 9, "budget.max_wall_s": 60.0}),
        clock=clock,
        started=clock() - 50.0,
        predicted_trial_s=9.5,
    )
    assert walled.ended_by(study, verify_estimate_s=12.0) == WALL
    assert walled.end_line(study, WALL, ran_here=3) == (
        "the wall budget ended the search: hydra.sweeper.budget.max_wall_s=60 s allowed 3 trial(s) "
        "in 50 s, the rest kept for verification; one trial took 12.0 s (median; predicted 9.5 s)"
    )
    counted = Budget(settings_from({"n_trials": 3}), clock=clock)
    assert counted.ended_by(study, verify_estimate_s=0.0) == TRIALS
    assert counted.end_line(study, TRIALS, ran_here=2) == (
        "the trial budget ended the search: hydra.sweeper.n_trials=3 allowed 3 trial(s) in the "
        "study (3 counted, 2 launched here); one trial took 12.0 s (median; predicted ?)"
    )
    assert (
        Budget(settings_from({"n_trials": 5}), clock=clock).ended_by(study, verify_estimate_s=0.0)
        is None
    )


def test_queued_points_the_search_never_ran_are_failed_as_unrun_and_queued_again() -> None:
    study = make_study([1.0])
    study.enqueue_trial({"mb": 8}, user_attrs={"baseline": True})
    study.enqueue_trial({"mb": 16}, user_attrs={"design": True})
    assert fail_waiting(study, reason="not run: the wall budget ended the search") == [1, 2]
    assert not study.get_trials(states=(TrialState.WAITING,))  # none left waiting
    assert {t.user_attrs.get("failure_kind") for t in study.trials[1:]} == {UNRUN}
    assert count_finished(study) == 1  # an unrun point ran nothing and costs no budget
    assert requeue_unrun(study) == [1, 2]  # the next sweep on the study runs them after all
    assert requeue_unrun(study) == []  # once
    queued = study.get_trials(states=(TrialState.WAITING,))
    assert [
        (
            planned_params(t),
            t.user_attrs.get("baseline"),
            t.user_attrs.get("design"),
            t.user_attrs[REQUEUED_ATTR],
        )
        for t in queued
    ] == [({"mb": 8}, True, None, 1), ({"mb": 16}, None, True, 2)]


FAST_SMOKE = ["search=smoke", "hydra.sweeper.mlflow.enabled=false", "hydra.sweeper.verify.top_k=1"]


@pytest.mark.parametrize(
    ("n_trials", "walls", "kinds", "starts"),
    [
        (5, [], (), None),  # a new study: nothing to say
        (
            5,
            [1.0, 2.0],
            ("excluded",),
            "the study holds 2 of its 5 trial(s) (hydra.sweeper."
            "n_trials=5): it searches up to 3 more before verification",
        ),  # excluded cost nothing
        (
            2,
            [1.0, 2.0],
            ("oom",),
            "the study holds 3 trial(s), its hydra.sweeper.n_trials=2 "
            "spent: no search, straight to verification",
        ),  # a failure is a spent trial
        (0, [1.0], (), "the study holds 1 trial(s) and has no trial budget"),
    ],
)
def test_a_resumed_study_says_whether_it_searches_on(n_trials, walls, kinds, starts) -> None:
    """The resume rule (issue 35): only n_trials carries over, so a study whose search a wall
    budget ended searches on; the line names the n_trials that goes straight to verification."""
    line = resume_line(make_study(walls, kinds), settings_from({"n_trials": n_trials}))
    assert (line is None) if starts is None else line.startswith(starts), line
    if line and "searches up to" in line:
        assert line.endswith("hydra.sweeper.n_trials=2 goes straight to verification")


def test_a_wall_budget_ends_the_search_in_one_line_and_leaves_no_trial_waiting(tmp_path) -> None:
    """TPE queues 11 spread-out points; a 30 s budget (after a ~10 s start, at most five trials
    measured for 4 s each) runs some, and says why it stopped. A continuous learning rate
    (ignored by throughput) keeps the space from running out first, whatever the machine's speed."""
    proc = run_sweep(
        tmp_path,
        *FAST_SMOKE,
        "optim.lr=interval(0.0001,0.0005)",
        "trial.max_steps=10000",
        "trial.max_seconds=4",  # a window of 4 s
        "hydra.sweeper.sampler=tpe",
        "hydra.sweeper.n_startup_trials=12",
        "hydra.sweeper.n_trials=50",
        "hydra.sweeper.budget.max_wall_s=30",
        "hydra.sweeper.study_name=wall",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    (line,) = [ln for ln in out.splitlines() if "budget ended the search" in ln]
    assert line.startswith(
        "the wall budget ended the search: hydra.sweeper.budget.max_wall_s=30 s allowed "
    ), line
    assert "one trial took" in line and "predicted" in line, line
    study = load_study(tmp_path, "wall")
    assert not study.get_trials(states=(TrialState.WAITING,))
    unrun = [t for t in study.trials if t.user_attrs.get("failure_kind") == UNRUN]
    assert unrun, [(t.number, t.state.name) for t in study.trials]
    assert all("wall budget ended the search" in t.user_attrs["failure_reason"] for t in unrun)
    assert "not run: recorded as unrun; a resumed sweep queues them again" in out
    # the same command again searches on (only n_trials carries over) and says so; with
    # n_trials at the trials it holds, it goes straight to verification (issue 35)
    spent = Budget(settings_from({"n_trials": 50})).spent(study)
    again = run_sweep(
        tmp_path,
        *FAST_SMOKE,
        "optim.lr=interval(0.0001,0.0005)",
        "trial.max_steps=10000",
        "trial.max_seconds=4",
        "hydra.sweeper.sampler=tpe",
        "hydra.sweeper.n_startup_trials=12",
        f"hydra.sweeper.n_trials={spent}",
        "hydra.sweeper.budget.max_wall_s=30",
        "hydra.sweeper.study_name=wall",
    )
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert (
        f"the study holds {spent} trial(s), its hydra.sweeper.n_trials={spent} spent: no "
        "search, straight to verification"
    ) in out
    after = load_study(tmp_path, "wall")
    assert Budget(settings_from({"n_trials": 50})).spent(after) == spent
    assert "the trial budget ended the search" in out


def test_a_sweep_that_exports_nothing_exits_1_with_one_line(tmp_path) -> None:
    proc = run_sweep(
        tmp_path,
        *FAST_SMOKE,
        "hooks.fault=crash",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.study_name=crash",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    # the planted crashes log their own tracebacks as trial reasons; the sweep's end has none
    assert "Traceback" not in proc.stdout.rsplit("trials: ", 1)[1], out[-3000:]
    errors = [ln for ln in out.splitlines() if "nothing to verify or export" in ln]
    assert len(errors) == 1, out[-3000:]
    assert "no trial completed (crash 2" in errors[0]
    assert (
        "the trial budget ended the search: hydra.sweeper.n_trials=2 allowed 2 trial(s)"
        in (errors[0])
    )
    assert "nothing to verify or export; see each failed trial's failure_reason" in errors[0]
    assert not load_study(tmp_path, "crash").get_trials(states=(TrialState.WAITING,))
