"""The prior (sweeper/plan/prior.py): the points the memory model and the FLOP arithmetic pick
before TPE's design, each with its reason, on a GPU and on a CPU (tables), and their place in the
study's queue (after the starting config, before the design, counted among the startup trials)."""

from __future__ import annotations

import pytest

from sweeper.plan.prior import Prior, PriorPoint, prior_points
from sweeper.report.prior_text import point_text, prior_line
from sweeper.space.constraints import SpaceContext
from sweeper.space.limits import point_forecast
from sweeper.space.point import Point
from sweeper.space.search_space import parse_space
from tests.model_shapes import TINY
from tests.sweeper.test_plan import XL, xl_ctx

XL_SPACE = {
    "runtime.compile": "choice(none, default, max-autotune-no-cudagraphs)",
    "batch.micro_batch": {"split": True, "max": 64},
    "data.num_workers": "range(0, 2)",
    "data.pin_memory": "choice(true, false)",
    "runtime.dtype": "choice(fp32, bf16)",
    "runtime.attention": "choice(auto, flash, efficient, cudnn, math)",
    "runtime.activation_checkpointing": "choice(none, every)",
    "checkpoint.mode": "choice(sync, async)",
}
KNOBS = (
    "batch.micro_batch",
    "runtime.activation_checkpointing",
    "runtime.dtype",
    "runtime.compile",
    "runtime.attention",
)


def _knobs(point: dict) -> tuple:
    return tuple(point[k] for k in KNOBS)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        # 80 GB: compiled micro-batch 8 without recompute fits; 16 needs it (73.55 GiB measured
        # compiled on an H200, over the 72.9 usable here); 16 fits with it
        (
            "NVIDIA H100 80GB HBM3",
            [(8, "none", "bf16", "default", "flash"), (16, "every", "bf16", "default", "flash")],
        ),
        # 141 GB: one size larger each
        (
            "NVIDIA H200",
            [(32, "none", "bf16", "default", "flash"), (64, "every", "bf16", "default", "flash")],
        ),
        # 40 GB: micro-batch 2 without recompute; 4 with it
        (
            "NVIDIA A100-SXM4-40GB",
            [(2, "none", "bf16", "default", "flash"), (4, "every", "bf16", "default", "flash")],
        ),
    ],
)
def test_gpu_prior_points(device, expected) -> None:
    ctx = xl_ctx(device)
    space = parse_space(XL_SPACE, ctx)
    prior = prior_points(space, ctx)
    assert [_knobs(p.params) for p in prior.points] == expected
    first, second = prior.points
    assert (first.rule, second.rule) == ("largest_fit", "size_up") and prior.kind == "gpu"
    assert second.compute == pytest.approx(4 / 3)
    assert "largest micro-batch that fits without recompute" in point_text(first)
    said = point_text(second)
    assert "one micro-batch size up" in said and "1.33x the compute" in said
    for p in prior.points:  # host-side knobs where they help a GPU step
        assert p.params["data.pin_memory"] is True and p.params["checkpoint.mode"] == "async"
        assert p.params["data.num_workers"] == 1
        assert space.check(p.params) is None  # the space's own rules, memory model included
        # a typed point: the knobs its trial sets (grad_accum follows), its fit and forecast
        assert p.point == space.point(p.params)
        assert p.point.fit is not None and not p.point.fit.changed
        assert p.point.forecast == point_forecast(p.point, ctx) and p.point.forecast.total_s > 0
    assert "2 point(s) from the memory model and the FLOP arithmetic" in prior_line(prior)


def test_no_prior_where_nothing_fits() -> None:
    ctx = xl_ctx("NVIDIA L4")  # 22.5 GB: gpt2-xl's weights and AdamW state alone do not fit
    prior = prior_points(parse_space(XL_SPACE, ctx), ctx)
    assert prior.points == [] and "no point of the space fits" in prior_line(prior)


def test_new_levers_each_get_a_point_where_present() -> None:
    ctx = xl_ctx()
    present = {**XL_SPACE, "runtime.activation_checkpointing": "choice(none, every, every_2)"}
    prior = prior_points(parse_space(present, ctx), ctx)
    # the cheapest recompute that fits one size up: every other block (1.17x), not every block
    assert _knobs(prior.points[1].params)[:2] == (16, "every_2")
    assert "1.17x the compute" in point_text(prior.points[1])
    # levers the space does not hold are skipped, never an error
    assert len(prior.points) == 2


def test_the_starting_config_is_never_repeated() -> None:
    ctx = xl_ctx()
    space = parse_space(XL_SPACE, ctx)
    first = prior_points(space, ctx).points[0].params
    again = prior_points(space, ctx, start=first)
    assert first not in [p.params for p in again.points]


def test_the_prior_can_be_turned_off() -> None:
    ctx = xl_ctx()
    prior = prior_points(parse_space(XL_SPACE, ctx), ctx, enabled=False)
    assert prior.points == [] and prior.kind == "off"
    assert prior_line(prior) == "prior: off (hydra.sweeper.prior=false)"


def cpu_ctx(cpus: int) -> SpaceContext:
    base = {
        **XL,
        **TINY,
        "batch.micro_batch": 8,
        "batch.grad_accum": 8,
        "runtime.dtype": "auto",
        "data.num_workers": 1,
        "runtime.threads": 0,
    }
    return SpaceContext(
        tokens_per_step=4096, block_size=64, cpu_count=cpus, device_type="cpu", base=base
    )


@pytest.mark.parametrize(
    ("cpus", "workers"),
    [(2, 0), (8, 1)],  # on two cores a worker takes a core from the step
)
def test_cpu_prior_sets_threads_and_workers_only(cpus, workers) -> None:
    ctx = cpu_ctx(cpus)
    space = parse_space(
        {
            "batch.micro_batch": {"split": True, "max": 32},
            "data.num_workers": "choice(0, 1)",
            "runtime.threads": f"choice(1, {cpus})",
            "runtime.compile": "choice(none, default)",
            "runtime.dtype": "choice(fp32, bf16)",
        },
        ctx,
    )
    prior = prior_points(space, ctx)
    assert len(prior.points) == 1
    p = prior.points[0].params
    assert (p["runtime.threads"], p["data.num_workers"]) == (cpus, workers)
    # the GPU arithmetic is not applied on a CPU: the starting config's micro-batch, dtype, compile
    assert (p["batch.micro_batch"], p["runtime.dtype"], p["runtime.compile"]) == (8, "fp32", "none")
    assert "does not hold on a CPU" in prior_line(prior)
    assert f"on this CPU ({cpus} cores)" in point_text(prior.points[0])


def test_cpu_prior_without_threads_or_workers_in_the_space_is_empty() -> None:
    ctx = cpu_ctx(2)
    prior = prior_points(parse_space({"batch.micro_batch": {"split": True, "max": 32}}, ctx), ctx)
    assert prior.points == [] and "no point on this CPU" in prior_line(prior)


def test_the_prior_is_queued_after_the_start_and_counts_among_the_startup_trials() -> None:
    from types import SimpleNamespace

    import optuna

    from sweeper.settings import settings_from
    from sweeper.start import DESIGN_ATTR, PRIOR_ATTR, queue_design, queue_prior

    ctx = xl_ctx()
    space = parse_space(XL_SPACE, ctx)
    settings = settings_from({"n_trials": 14, "n_startup_trials": 5, "seed": 0})
    study = optuna.create_study(direction="maximize")
    start = {**prior_points(space, ctx).points[0].params, "data.num_workers": 0}
    study.enqueue_trial(start, user_attrs={"baseline": True})
    prepared = SimpleNamespace(space=space, ctx=ctx, settings=settings)
    queued = queue_prior(study, prepared, start)
    queue_design(study, space, start, settings, queued=queued)
    trials = study.get_trials(deepcopy=False)
    kinds = [
        "baseline"
        if t.user_attrs.get("baseline")
        else "prior"
        if PRIOR_ATTR in t.user_attrs
        else "design"
        if t.user_attrs.get(DESIGN_ATTR)
        else "?"
        for t in trials
    ]
    assert kinds == ["baseline", "prior", "prior", "design", "design"]  # 5 startup trials in all
    assert "largest micro-batch" in trials[1].user_attrs[PRIOR_ATTR]
    # queued once: a resumed study queues neither again
    assert queue_prior(study, prepared, start) == []


LEVER_POINT = {"batch.micro_batch": 16, "runtime.float8": "tensorwise"}
SIZE_UP = {"batch.micro_batch": 4, "runtime.activation_checkpointing": "every_2"}
WORDS = [
    (
        PriorPoint(
            point=Point.of(LEVER_POINT),
            params=LEVER_POINT,
            rule="lever",
            lever=("runtime.float8", "tensorwise"),
        ),
        "runtime.float8=tensorwise on the largest fit: a new lever of the compute-bound step",
    ),
    (
        PriorPoint(
            point=Point.of(LEVER_POINT),
            params=LEVER_POINT,
            rule="lever",
            lever=("runtime.float8", "tensorwise"),
            refit=True,
        ),
        "runtime.float8=tensorwise on the largest fit: a new lever of the compute-bound step; it "
        "frees memory: micro-batch 16 fits without recompute",
    ),
    (
        PriorPoint(
            point=Point.of(SIZE_UP),
            params=SIZE_UP,
            rule="size_up",
            compute=7 / 6,
        ),
        "one micro-batch size up (4) with the cheapest recompute that fits "
        "(runtime.activation_checkpointing=every_2, 1.17x the compute)",
    ),
    (
        PriorPoint(
            point=Point(),
            params={},
            rule="cpu",
            knobs={"runtime.threads": 2, "data.num_workers": 0},
            cores=2,
        ),
        "on this CPU (2 cores): threads=2, num_workers=0: every core to the step, and no "
        "DataLoader worker competing with it on a few cores",
    ),
]


@pytest.mark.parametrize(("point", "words"), WORDS, ids=[w[0].rule for w in WORDS])
def test_a_points_reason_is_written_from_its_rule_and_numbers(point, words) -> None:
    assert point_text(point) == words


@pytest.mark.parametrize(
    ("kind", "n", "words"),
    [
        ("not_tpe", 0, "prior: off (only TPE queues it)"),
        ("nothing_searched", 0, "prior: none (nothing is searched)"),
        ("no_fit", 0, "prior: none (no point of the space fits without recompute)"),
        ("cpu", 1, "prior: 1 point(s) on this CPU: the FLOP arithmetic does not hold on a CPU"),
        ("gpu", 0, "prior: 0 point(s) from the memory model and the FLOP arithmetic, measured"),
    ],
)
def test_the_priors_line_is_written_from_its_kind(kind, n, words) -> None:
    points = [PriorPoint(point=Point(), params={}, rule="cpu", cores=2)] * n
    assert prior_line(Prior(points=points, kind=kind)).startswith(words)
