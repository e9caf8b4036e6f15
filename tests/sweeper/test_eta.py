"""The sweep's ETA (sweeper/study/eta.py): measured walls, the race with the starting config, the
real-steps runs of a projected search, the wall budget's cap; and its line."""

from __future__ import annotations

import pytest

from sweeper.study.eta import Eta, estimate, race_runs


@pytest.mark.parametrize(
    ("contenders", "repeats", "max_rounds", "runs"),
    [
        (4, 3, 0, 12),  # a fixed race: every contender, every round
        (4, 3, 3, 12),
        (4, 3, 6, 18),  # then the leader and one challenger for 3 more rounds
        (1, 3, 6, 6),  # one contender races alone
        (0, 3, 6, 0),
    ],
)
def test_race_runs(contenders: int, repeats: int, max_rounds: int, runs: int) -> None:
    assert race_runs(contenders=contenders, repeats=repeats, max_rounds=max_rounds) == runs


BASE = {"contenders": 4, "repeats": 3, "max_rounds": 0, "wall_left_s": None}


@pytest.mark.parametrize(
    ("case", "kwargs", "total", "run_s"),
    [
        # 10 trials at the median 3 s, and a race of 12 runs at the complete trials' 7 s: the
        # issue's "eta 24s before a 70 s race" counted neither the start nor the complete walls
        (
            "race priced by complete trials",
            {"trials_left": 10, "trial_walls": [3.0, 3.0, 9.0], "complete_walls": [7.0]},
            10 * 3 + 12 * 7,
            7.0,
        ),
        (
            "no complete trial yet: the median trial",
            {"trials_left": 2, "trial_walls": [4.0], "complete_walls": []},
            2 * 4 + 12 * 4,
            4.0,
        ),
        # projected search trials: a real-steps run predicted 20 s, the trials ran 2x their
        # prediction: 40 s a race run
        (
            "projected search",
            {
                "trials_left": 0,
                "trial_walls": [6.0],
                "complete_walls": [6.0],
                "predicted_trial_s": 3.0,
                "predicted_run_s": 20.0,
            },
            12 * 40,
            40.0,
        ),
        # the wall budget ends the sweep first ...
        (
            "wall cap",
            {"trials_left": 10, "trial_walls": [5.0], "complete_walls": [5.0], "wall_left_s": 60.0},
            60.0,
            5.0,
        ),
        # ... but the race's first round (4 runs) always runs
        (
            "past the budget",
            {"trials_left": 10, "trial_walls": [5.0], "complete_walls": [5.0], "wall_left_s": 0.0},
            20.0,
            5.0,
        ),
    ],
)
def test_estimate(case: str, kwargs: dict, total: float, run_s: float) -> None:
    eta = estimate(**{**BASE, **kwargs})
    assert eta.total_s == pytest.approx(total), case
    assert eta.run_s == pytest.approx(run_s), case


def test_no_wall_measured_yet_is_unknown_or_the_budget() -> None:
    assert estimate(**BASE, trials_left=5, trial_walls=[], complete_walls=[]).total_s is None
    capped = estimate(
        **{**BASE, "wall_left_s": 300.0}, trials_left=5, trial_walls=[], complete_walls=[]
    )
    assert capped.total_s == 300.0 and capped.text() == "eta 5m00s (the wall budget)"


def test_the_line_says_what_the_eta_is_made_of() -> None:
    eta = estimate(**BASE, trials_left=10, trial_walls=[3.0], complete_walls=[7.0])
    assert eta.text() == "eta 1m54s (10 trial(s) x 3.0 s + race ~12 runs x 7.0 s)"
    capped = estimate(
        **{**BASE, "wall_left_s": 60.0}, trials_left=10, trial_walls=[5.0], complete_walls=[5.0]
    )
    assert capped.text().endswith("; the wall budget ends it first)")
    assert (
        Eta(total_s=None, trials_left=0, trial_s=None, race_runs=0, run_s=None, capped=False).text()
        == "eta -"
    )


@pytest.mark.parametrize(
    ("values", "start", "top_k", "contenders"),
    [
        ([5.0, 4.0, 3.0, 2.0], 3, 2, 3),  # the start (2nd worst) races beside the top 2
        ([5.0, 4.0, 3.0, 2.0], 0, 2, 2),  # the start is the best: among the top 2
        ([5.0, 4.0, 3.0, 2.0], None, 2, 2),  # no starting config in the space
        ([5.0], 0, 3, 4),  # fewer complete trials than top_k: the most the race can hold
    ],
)
def test_race_size(values: list[float], start: int | None, top_k: int, contenders: int) -> None:
    import optuna

    from sweeper.study.budget import race_size

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for i, v in enumerate(values):
        trial = study.ask()
        if i == start:
            trial.set_user_attr("baseline", True)
        study.tell(trial, v)
    assert race_size(study, top_k) == contenders
