"""The numerics guard's pure parts: curve arithmetic (sweeper/verify/guard_rules.py), the
math-changing keys (sweeper/space/math_keys.py), its settings (the `guard` group, GuardConf, checked
by sweeper/settings.py), whether it runs (sweeper/plan/guard_price.py) and the curve-run keys
(train/core/curve.py)."""

from __future__ import annotations

import math

import pytest

from sweeper.plan.guard_price import guard_mode
from sweeper.settings import GuardConf, settings_from
from sweeper.space.math_keys import MATH_KEYS, changes_text, math_changes, searched_math_keys
from sweeper.space.point import Point
from sweeper.verify.guard_rules import (
    check,
    curve_run_s,
    curve_text,
    divergence,
    tolerance,
    window_size,
    windowed_means,
)
from sweeper.verify.guard_text import check_text, descent_text, mode_text, tolerance_text
from train.core.curve import capped_split, curve_keys, loss_curve

FALLING = [8.0 - 0.05 * i for i in range(20)]  # a reference curve: 8.00, 7.95, ... 7.05


@pytest.mark.parametrize(("steps", "window"), [(1, 1), (4, 1), (5, 1), (12, 2), (20, 4), (100, 20)])
def test_window_is_a_fifth_of_the_curve(steps: int, window: int) -> None:
    assert window_size(steps) == window


@pytest.mark.parametrize(
    ("curve", "window", "means"),
    [
        ([1.0, 2.0, 3.0, 4.0], 1, [1.0, 2.0, 3.0, 4.0]),
        ([1.0, 2.0, 3.0, 4.0], 2, [1.5, 2.5, 3.5]),
        ([1.0, 2.0, 3.0, 4.0], 4, [2.5]),
    ],
)
def test_windowed_means(curve: list[float], window: int, means: list[float]) -> None:
    assert windowed_means(curve, window) == pytest.approx(means)


def test_windowed_means_refuses_a_window_longer_than_the_curve() -> None:
    with pytest.raises(ValueError, match="shorter than the window"):
        windowed_means([1.0, 2.0], 3)


@pytest.mark.parametrize(
    ("other", "window", "value", "step"),
    [
        (FALLING, 4, 0.0, 0),  # the same curve
        ([x + 0.1 for x in FALLING], 4, 0.1, None),  # a constant offset: every window alike
        ([x + (0.4 if i == 10 else 0) for i, x in enumerate(FALLING)], 4, 0.1, 7),  # one spike / 4
        ([x + 0.01 * i for i, x in enumerate(FALLING)], 1, 0.19, 19),  # a drift: worst at the end
        ([*FALLING[:5], math.nan, *FALLING[6:]], 4, math.inf, 2),  # a NaN is infinitely far
    ],
)
def test_divergence_is_the_largest_windowed_gap(
    other: list[float], window: int, value: float, step: int | None
) -> None:
    d = divergence(other, FALLING, window=window)
    assert d.value == pytest.approx(value)
    assert d.step == (d.step if step is None else step) and d.window == window


def test_divergence_compares_the_common_length_and_refuses_nothing() -> None:
    assert divergence(FALLING[:6], FALLING, window=10).window == 6  # clamped to the curve
    with pytest.raises(ValueError, match="empty"):
        divergence([], FALLING, window=4)


def test_tolerance_is_k_times_the_largest_seed_gap_with_its_derivation() -> None:
    curves = {1: FALLING, 2: [x + 0.02 for x in FALLING], 3: [x - 0.01 for x in FALLING]}
    tol = tolerance(curves, k=2.0, floor=0.01, window=4)
    assert tol.spread == pytest.approx(0.03)  # seeds 2 vs 3
    assert tol.value == pytest.approx(0.06)
    assert len(tol.pairs) == 3
    text = tolerance_text(tol)
    assert "tolerance 0.0600 nats = 2 x seed spread 0.0300" in text
    assert "3 seeds" in text and "largest: seeds 2 vs 3" in text
    assert tol.as_dict() == {
        "value": tol.value,
        "spread": tol.spread,
        "k": 2.0,
        "floor": 0.01,
        "window": 4,
    }


def test_tolerance_never_below_its_floor_and_says_so() -> None:
    tol = tolerance({1: FALLING, 2: [x + 0.001 for x in FALLING]}, k=2.0, floor=0.01, window=4)
    assert tol.value == pytest.approx(0.01)
    assert "the floor 0.01 (k 2 x seed spread 0.0010 = 0.0020 is below it)" in tolerance_text(tol)


def test_tolerance_needs_two_seeds() -> None:
    with pytest.raises(ValueError, match="at least 2 reference curves"):
        tolerance({1: FALLING}, k=2.0, floor=0.01, window=4)


@pytest.mark.parametrize(
    ("offset", "passed", "word"),
    [(0.0, True, "within"), (0.05, True, "within"), (0.07, False, "OUTSIDE")],
)
def test_check_passes_within_the_tolerance_only(offset: float, passed: bool, word: str) -> None:
    tol = tolerance({1: FALLING, 2: [x + 0.03 for x in FALLING]}, k=2.0, floor=0.01, window=4)
    result = check([x + offset for x in FALLING], FALLING, tol)
    assert result.passed is passed
    assert (result.steps, result.window, result.last) == (
        len(FALLING),
        4,
        (FALLING[-1] + offset, FALLING[-1]),
    )
    assert result.mean_gap == pytest.approx(offset)
    reason = check_text(result)
    assert word in reason and "0.0600" in reason
    assert f"last step {FALLING[-1] + offset:.4f} vs {FALLING[-1]:.4f}" in reason


@pytest.mark.parametrize(
    ("result", "seconds"),
    [
        # 20 s wall of which 5 measured steps of 2 s: 10 s of set-up, then 20 steps of 2 s
        (
            {
                "status": "complete",
                "wall_s": 20.0,
                "step_time_s": {"p50": 2.0, "n": 5},
                "projection": None,
            },
            50.0,
        ),
        # a projected window: its steps are full steps (8 s) projected from short ones (0.5 s,
        # what the wall holds); never the warm-up's full-step estimate, which held the compile
        # (the H200's gpt2-xl: 91.3 s against a 21.6 s step)
        (
            {
                "status": "complete",
                "wall_s": 20.0,
                "step_time_s": {"p50": 8.0, "n": 4},
                "projection": {"micro_batches_per_step": 4, "short_step_s": {"p50": 0.5}},
                "full_step_estimate_s": 91.3,
            },
            178.0,
        ),
        ({"status": "failed", "wall_s": 3.0, "step_time_s": None}, None),
        (None, None),
    ],
)
def test_curve_run_is_priced_from_the_start_s_own_trial(result, seconds) -> None:
    assert curve_run_s(result, steps=20) == seconds


def test_a_capped_curve_step_is_priced_at_its_share_of_the_full_step() -> None:
    # 10 s of set-up, then 20 steps of a quarter of the 2 s full step (4 of 16 micro-batches)
    result = {
        "status": "complete",
        "wall_s": 20.0,
        "step_time_s": {"p50": 2.0, "n": 5},
        "projection": None,
    }
    assert curve_run_s(result, steps=20, step_share=0.25) == pytest.approx(20.0)


def test_curve_text_prints_every_step() -> None:
    assert curve_text([8.3226, 8.31]) == "8.323 8.310"


# -- the math-changing keys ----------------------------------------------------------------------

REF = {
    "runtime.dtype": "fp32",
    "runtime.tf32": True,
    "runtime.attention": "auto",
    "hooks.fault": "none",
    "runtime.compile": "none",
}


@pytest.mark.parametrize(
    ("candidate", "changed"),
    [
        ({"runtime.compile": "default"}, {}),  # a speed knob never counts
        ({"runtime.dtype": "fp32", "runtime.tf32": "true"}, {}),  # the same values, as text
        ({"runtime.dtype": "bf16"}, {"runtime.dtype": ("fp32", "bf16")}),
        ({"runtime.tf32": False}, {"runtime.tf32": (True, False)}),
        ({"hooks.fault": "coarse_weights"}, {"hooks.fault": ("none", "coarse_weights")}),
        # a key the reference lacks (a lever not in this trainer yet) counts as changed
        ({"runtime.float8": "tensorwise"}, {"runtime.float8": (None, "tensorwise")}),
        ({"runtime.loss": "chunked"}, {"runtime.loss": (None, "chunked")}),
    ],
)
def test_math_changes(candidate: dict, changed: dict) -> None:
    assert math_changes(REF, candidate) == changed


def test_tf32_changes_the_math_on_cuda_only() -> None:
    assert math_changes(REF, {"runtime.tf32": False}, device_type="cpu") == {}
    assert math_changes(
        REF, {"runtime.tf32": False, "runtime.dtype": "bf16"}, device_type="cpu"
    ) == {"runtime.dtype": ("fp32", "bf16")}


def test_the_issue_s_math_keys_are_listed_once() -> None:
    for key in (
        "runtime.dtype",
        "runtime.tf32",
        "runtime.float8",
        "runtime.float8_emulate",
        "runtime.loss",
        "runtime.attention",
    ):
        assert MATH_KEYS.count(key) == 1
    assert changes_text({"runtime.tf32": (True, False), "runtime.loss": (None, "chunked")}) == (
        "runtime.tf32 true -> false, runtime.loss (unset) -> chunked"
    )


@pytest.mark.parametrize(
    ("searched", "keys"),
    [
        ({"batch.micro_batch": [4, 8], "runtime.compile": ["none", "default"]}, []),
        ({"runtime.dtype": ["fp32"]}, []),  # one value is no choice
        (
            {"runtime.tf32": [True, False], "runtime.dtype": ["fp32", "bf16"]},
            ["runtime.dtype", "runtime.tf32"],
        ),
        ({"runtime.loss": None}, ["runtime.loss"]),  # a range
    ],
)
def test_searched_math_keys(searched: dict, keys: list[str]) -> None:
    assert searched_math_keys(searched) == keys


# -- settings and mode ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"guard.mode": "maybe"}, r"guard.mode='maybe': use auto, on or off"),
        ({"guard.steps": 4}, r"guard.steps=4: use an integer >= 5"),
        ({"guard.seeds": 1}, r"guard.seeds=1: a seed spread needs at least 2"),
        ({"guard.k": 0}, r"guard.k=0.0: use a finite number > 0"),
        ({"guard.k": float("inf")}, r"guard.k=inf"),
        ({"guard.floor": -0.1}, r"guard.floor=-0.1: use a finite number"),
        ({"guard.tokens": 0}, r"guard.tokens=0: use an integer >= 1"),
    ],
)
def test_bad_guard_settings_fail_up_front_in_one_line(given: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        settings_from(given)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("given", "mode"),
    [("auto", "auto"), ("ON", "on"), (True, "on"), (False, "off"), ("false", "off")],
)
def test_guard_mode_setting_reads_booleans(given, mode: str) -> None:
    assert settings_from({"guard.mode": given}).guard.mode == mode


@pytest.mark.parametrize(
    ("mode", "searched", "on", "why"),
    [
        (
            "auto",
            {"runtime.dtype": ["fp32", "bf16"]},
            True,
            "auto: the space searches runtime.dtype",
        ),
        ("auto", {"runtime.compile": ["none", "default"]}, False, "searches no math-changing"),
        ("on", {}, True, "guard.mode=on"),
        ("off", {"runtime.dtype": ["fp32", "bf16"]}, False, "guard.mode=off"),
    ],
)
def test_guard_runs_where_the_space_searches_math(mode, searched, on, why) -> None:
    got = guard_mode(GuardConf(mode=mode), searched)
    assert got.on is on and why in mode_text(got)
    assert got.keys == (tuple(searched) if mode == "auto" and on else ())


# -- the curve run -------------------------------------------------------------------------------


def test_curve_keys_make_exactly_the_asked_full_steps() -> None:
    keys = curve_keys(steps=20, seed=7)
    assert keys["runtime.seed"] == 7
    assert keys["trial.warmup_steps"] + keys["trial.max_steps"] == 20
    assert keys["trial.min_steps"] == keys["trial.max_steps"]  # no time budget cuts it short
    assert keys["trial.project_above_s"] == 0 and keys["trial.target_ci"] == 0
    assert keys["checkpoint.every_steps"] == 0
    with pytest.raises(ValueError, match="at least 3 steps"):
        curve_keys(steps=2, seed=7)


@pytest.mark.parametrize(
    ("tokens", "micro", "block", "world", "cap", "split"),
    [
        (4096, 8, 64, 1, 65536, {}),  # the default CPU sweep's step fits: full steps
        (1_048_576, 16, 1024, 1, 65536, {"batch.grad_accum": 4, "batch.tokens_per_step": 65536}),
        (1_048_576, 16, 1024, 8, 65536, {"batch.grad_accum": 1, "batch.tokens_per_step": 131072}),
        (1_048_576, 48, 1024, 1, 65536, {"batch.grad_accum": 1, "batch.tokens_per_step": 49152}),
        (65536, 64, 1024, 1, 4096, {}),  # one micro-batch is the whole step: nothing to cut
        (131072, 8, 1024, 1, 100_000, {"batch.grad_accum": 12, "batch.tokens_per_step": 98304}),
    ],
)
def test_a_curve_step_holds_at_most_the_capped_tokens(tokens, micro, block, world, cap, split):
    got = capped_split(
        tokens_per_step=tokens,
        micro_batch=micro,
        block_size=block,
        world_size=world,
        max_tokens=cap,
    )
    assert got == split
    if got:  # whole micro-batches of the same size, never below one
        assert got["batch.tokens_per_step"] == got["batch.grad_accum"] * micro * block * world


def test_loss_curve_reads_complete_results_only() -> None:
    assert loss_curve({"status": "complete", "loss": {"steps": [8.3, 8.2]}}) == [8.3, 8.2]
    assert loss_curve({"status": "failed", "loss": {"steps": [8.3]}}) is None
    assert loss_curve({"status": "complete", "loss": {"first": 8.3}}) is None
    assert loss_curve(None) is None


# -- who races (guard_entrants without trials: off, nothing changed, out of budget) -------------


class _Study:
    def __init__(self) -> None:
        from types import SimpleNamespace

        self.user_attrs: dict = {}
        self.trials = [SimpleNamespace(user_attrs={})]  # the start, with no job dir

    def set_user_attr(self, key: str, value) -> None:
        self.user_attrs[key] = value


def _ctx(*, fits: bool, guard: str = "auto"):
    from types import SimpleNamespace

    from sweeper.space.constraints import SpaceContext
    from sweeper.space.search_space import parse_space

    base = {
        "runtime.dtype": "fp32",
        "hooks.fault": "none",
        "runtime.seed": 1337,
        "batch.micro_batch": 8,
        "batch.grad_accum": 8,
    }
    space = parse_space(
        {"runtime.dtype": "choice(fp32, bf16)", "runtime.compile": "choice(none, default)"},
        SpaceContext(tokens_per_step=4096, block_size=64, cpu_count=2, base=base),
    )
    budget = SimpleNamespace(
        verify_round_fits=lambda study, n, run_s=None: fits, wall_setting="budget.cpu_max_wall_s"
    )
    settings = settings_from({"guard.mode": guard, "budget.max_wall_s": 390})
    return SimpleNamespace(space=space, study=_Study(), budget=budget, settings=settings)


def _cands(ctx):
    from sweeper.verify.winner import Candidate

    points = {
        0: {"runtime.dtype": "fp32", "runtime.compile": "none"},
        1: {"runtime.dtype": "fp32", "runtime.compile": "default"},
        2: {"runtime.dtype": "bf16", "runtime.compile": "none"},
    }
    return {
        n: Candidate(
            key=str(n),
            params=p,
            overrides=[],
            values=[],
            simplicity=0,
            point=ctx.space.point(p),
        )
        for n, p in points.items()
    }


def test_unchecked_math_never_races_when_the_guard_does_not_fit_the_budget() -> None:
    from sweeper.verify.guard import guard_entrants

    ctx = _ctx(fits=False)
    out = guard_entrants(
        ctx, _cands(ctx), baseline={"runtime.dtype": "fp32", "runtime.compile": "none"}, start=0
    )
    assert sorted(out.passed) == [0, 1]  # a speed knob races unchecked
    # never checked is "not checked", never "failed": nothing says its math is wrong
    assert out.records[2]["verdict"] == "not checked"
    reason = out.records[2]["reason"]
    assert "do not fit the wall budget (hydra.sweeper.budget.cpu_max_wall_s=390 s)" in reason
    assert out.records[1]["verdict"] == "not needed"
    assert ctx.study.user_attrs["numerics_guard"]["candidates"]["2"]["verdict"] == "not checked"
    assert any(
        "trial 2 (runtime.dtype fp32 -> bf16) NOT CHECKED: not raced" in n for n in out.notes
    )
    assert not any("FAILED" in n for n in out.notes)


def test_guard_off_races_everyone_and_records_why() -> None:
    from sweeper.verify.guard import guard_entrants

    ctx = _ctx(fits=False, guard="off")
    out = guard_entrants(ctx, _cands(ctx), baseline=None, start=None)
    assert sorted(out.passed) == [0, 1, 2]
    assert out.records[2] == {"verdict": "off", "why": "off (hydra.sweeper.guard.mode=off)"}


# -- plan mode: no curve runs when every planned trial keeps the starting config's math ----------


@pytest.mark.parametrize(
    ("planned", "on"),
    [
        (None, True),  # TPE draws points the plan cannot know: priced at most
        (
            [{}, {"batch.micro_batch": 32, "batch.grad_accum": 32, "runtime.compile": "default"}],
            False,
        ),  # the H200 run of 2026-11-26: the start and the prior's first point
        ([{}, {"runtime.float8": "tensorwise"}], True),
        ([{"runtime.attention": "cudnn"}], True),  # another kernel is another function
    ],
)
def test_the_plan_prices_no_curve_runs_where_no_planned_trial_changes_the_math(planned, on) -> None:
    from sweeper.plan.guard_price import guard_plan
    from tests.sweeper.test_plan import xl_ctx

    start = {"runtime.dtype": "bf16", "runtime.attention": "auto", "runtime.float8": "none"}
    ctx = xl_ctx("NVIDIA H200", base={**xl_ctx().base, **start})
    settings = settings_from({"verify.top_k": 1})
    points = None if planned is None else [Point.of(p) for p in planned]
    g = guard_plan({"runtime.float8": ["none", "tensorwise"]}, ctx, settings, planned=points)
    assert g.on is on and (g.total_s > 0) is on
    if not on:
        from sweeper.report.plan_text import guard_text

        assert g.planned_without_math == len(planned)
        assert f"none of the {len(planned)} planned trial(s)" in guard_text(g)
        assert "no curve runs" in guard_text(g)


# -- a reference that does not train is no reference ---------------------------------------------


@pytest.mark.parametrize(
    ("curves", "spread", "trains", "seed"),
    [
        ({1: FALLING, 2: [*(x + 0.03 for x in FALLING[:-1]), 7.6]}, 0.03, True, 2),
        # rising: the gpt2-xl curves at the peak lr without warm-up (H200, 2026-11-26)
        ({1: [11.13, 13.62, 45.96, 59.78], 2: [11.13, 13.68, 48.12, 62.96]}, 2.2, False, 2),
        # flat within the seed spread: it falls 0.01, the seeds drift 0.05 apart
        ({1: [8.0, 8.0, 7.99, 7.99], 2: [8.05, 8.05, 8.04, 8.04]}, 0.05, False, 1),
        ({1: FALLING, 2: [*FALLING[:-1], math.nan]}, 0.03, False, 2),  # not finite
    ],
)
def test_descent_says_whether_the_reference_trained(curves, spread, trains, seed) -> None:
    from sweeper.verify.guard_rules import descent

    d = descent(curves, spread=spread, window=2)
    assert d.trains is trains and d.seed == seed
    text = descent_text(d)
    assert f"seed {seed}'s loss" in text and f"seed spread of {spread:.4f}" in text


def curves_out(curves: list[list[float]], *, seed0: int = 1337) -> dict:
    """A complete curve run's outcome: `curves[0]` from `seed0`, the rest from the next seeds in
    the same process (trial.seeds, loss.more_seeds)."""
    first, *more = curves
    loss = {
        "steps": first,
        "lr": [1e-4] * len(first),
        "more_seeds": [
            {"seed": seed0 + i, "steps": c, "lr": [1e-4] * len(c)} for i, c in enumerate(more, 1)
        ],
    }
    return {"state": "complete", "job_dir": "j", "result": {"status": "complete", "loss": loss}}


def test_a_reference_that_does_not_train_judges_nothing(monkeypatch) -> None:
    from types import SimpleNamespace

    import sweeper.verify.guard as guard
    import sweeper.verify.guard_runs as guard_runs

    ctx = _ctx(fits=True)
    launched: list[int] = []
    rising = {0: [11.1, 13.6, 46.0, 59.8, 60.0, 61.0], 1: [11.1, 13.7, 48.1, 63.0, 63.1, 63.5]}

    def launch(jobs: list) -> list[dict]:
        launched.append(len(jobs))
        return [curves_out([rising[0], rising[1]]) for _ in jobs]

    ctx.jobs = SimpleNamespace(launch=launch)
    ctx.tracker = None
    monkeypatch.setattr(guard_runs, "_curve_job", lambda *a, **k: [])
    monkeypatch.setattr(guard_runs, "log_guard_run", lambda *a, **k: None)
    monkeypatch.setattr(guard, "tag_sweep", lambda *a, **k: None)
    out = guard.guard_entrants(
        ctx, _cands(ctx), baseline={"runtime.dtype": "fp32", "runtime.compile": "none"}, start=0
    )
    # one process for the reference's seeds only: no contender runs against nothing
    assert launched == [1] and ctx.settings.guard.seeds == 2
    assert sorted(out.passed) == [0, 1]
    assert out.records[2]["verdict"] == "not checked"
    assert out.records[2]["reason"].startswith(
        "the reference did not train (seed 1338's loss rises 25.4500 nats from its first"
    )
    said = [n for n in out.notes if "did not train" in n]
    assert len(said) == 2 and not any("passed" in n.lower() for n in out.notes), out.notes
    summary = ctx.study.user_attrs["numerics_guard"]
    assert summary["reference_descent"]["trains"] is False
    assert summary["reference_lr"] == [1e-4] * 6


# -- the budget keeps room for the guard, as it does for the race ---------------------------------


def _study_with(points: list[tuple[dict, float, bool]], storage: str | None = None):
    import optuna
    from optuna.distributions import CategoricalDistribution

    from sweeper.study.optuna_study import StudySpec, open_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = (
        open_study(StudySpec(storage=storage, study_name="g", direction="maximize"))
        if storage
        else optuna.create_study(direction="maximize")
    )
    dists = {
        "runtime.dtype": CategoricalDistribution(["fp32", "bf16"]),
        "runtime.compile": CategoricalDistribution(["none", "default"]),
    }
    for params, value, baseline in points:
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=dists,
                value=value,
                user_attrs={"wall_s": 10.0, **({"baseline": True} if baseline else {})},
            )
        )
    return study


@pytest.mark.parametrize(
    ("points", "reserve"),
    [
        # the start and a speed knob on top: nothing to guard
        (
            [
                ({"runtime.dtype": "fp32", "runtime.compile": "none"}, 1.0, True),
                ({"runtime.dtype": "fp32", "runtime.compile": "default"}, 2.0, False),
            ],
            0.0,
        ),
        # bf16 in the top k (2): 2 reference seeds + 1 contender, at the trials' median 10 s
        (
            [
                ({"runtime.dtype": "fp32", "runtime.compile": "none"}, 1.0, True),
                ({"runtime.dtype": "bf16", "runtime.compile": "none"}, 2.0, False),
            ],
            30.0,
        ),
        # two bf16 contenders in the top k
        (
            [
                ({"runtime.dtype": "fp32", "runtime.compile": "none"}, 1.0, True),
                ({"runtime.dtype": "bf16", "runtime.compile": "none"}, 2.0, False),
                ({"runtime.dtype": "bf16", "runtime.compile": "default"}, 3.0, False),
            ],
            40.0,
        ),
    ],
)
def test_the_guards_reserve_follows_the_math_changing_contenders(points, reserve) -> None:
    from sweeper.verify.guard import guard_reserve_s

    ctx = _ctx(fits=True)
    settings = settings_from({"verify.top_k": 2, "budget.max_wall_s": 390})
    assert guard_reserve_s(_study_with(points), space=ctx.space, settings=settings) == reserve


def test_the_budget_holds_the_guards_runs_back_from_the_search(tmp_path) -> None:
    from sweeper.study.budget import Budget

    settings = settings_from({"budget.max_wall_s": 100, "verify.top_k": 1, "verify.repeats": 1})
    study = _study_with(
        [({"runtime.dtype": "fp32", "runtime.compile": "none"}, 1.0, True)],
        storage=f"sqlite:///{tmp_path / 'b.db'}",
    )
    now = [0.0]
    plain = Budget(settings, clock=lambda: now[0], started=0.0)
    guarded = Budget(settings, clock=lambda: now[0], started=0.0, guard_reserve=lambda s: 20.0)
    # the race keeps 2 runs x the 10 s median = 20 s; the guard its 20 s besides
    assert plain.verify_reserve_s(study, 0.0) == 20.0
    assert guarded.verify_reserve_s(study, 0.0) == 40.0
    now[0] = 60.0
    assert plain.trials_left(study, plain.verify_reserve_s(study, 0.0)) > 0
    assert guarded.trials_left(study, guarded.verify_reserve_s(study, 0.0)) == 0
    # never more than GUARD_SHARE of the wall besides the race's
    huge = Budget(settings, clock=lambda: 0.0, started=0.0, guard_reserve=lambda s: 1e6)
    assert huge.verify_reserve_s(study, 0.0) == 20.0 + 25.0


@pytest.mark.parametrize(
    ("seeds", "contenders", "runs", "total_s"),
    [
        # the start's trial: 30 s of set-up and compile around a window of 4 steps of 2 s; a curve
        # of 20 steps at the same step (its step holds every token: share 1) costs 30 + 40 s
        (2, 0, 1, 30 + 2 * 40),  # both seeds in one process: the 30 s once
        (2, 1, 2, (30 + 2 * 40) + (30 + 40)),
        (3, 2, 3, (30 + 3 * 40) + 2 * (30 + 40)),
    ],
)
def test_the_reference_seeds_are_one_process_priced_once(seeds, contenders, runs, total_s) -> None:
    from sweeper.verify.guard import guard_runs

    ctx = _ctx(fits=True)
    rules = settings_from({"guard.seeds": seeds, "guard.steps": 20}).guard
    start = {"status": "complete", "wall_s": 38.0, "step_time_s": {"p50": 2.0, "n": 4}}
    got_runs, run_s = guard_runs(ctx.space, rules, Point(), start, contenders=contenders)
    assert got_runs == runs and run_s * runs == pytest.approx(total_s)
    # with no usable starting result: a run per seed, priced by the caller
    assert guard_runs(ctx.space, rules, Point(), None, contenders=contenders) == (
        seeds + contenders,
        None,
    )
