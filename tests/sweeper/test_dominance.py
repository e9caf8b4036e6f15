"""Points that cannot win (sweeper/space/dominance.py): more activation checkpointing than the
micro-batch needs is refused where a cheaper choice of the space is predicted to fit."""

from __future__ import annotations

import pytest

from sweeper.plan.scan import drop_dead_values, scan
from sweeper.space.constraints import check_point
from sweeper.space.dominance import cheaper_that_fits, dominated_text, recompute_cost
from sweeper.space.fit import nearest_fit
from sweeper.space.memory import OutOfMemory
from sweeper.space.search_space import baseline_params, parse_space
from tests.sweeper.test_plan import XL, xl_ctx

RECOMPUTE = "runtime.activation_checkpointing"


@pytest.mark.parametrize(
    ("mine", "choices", "fitting", "want"),
    [
        ("every", ("none", "every"), {"none", "every"}, "none"),
        ("every", ("none", "every_2", "every"), {"every_2", "every"}, "every_2"),
        ("every", ("none", "selective", "every_2", "every"), {"selective", "every_2"}, "selective"),
        # selective reruns no matmul (factor 1, as none's) but still reruns the cheap ops
        ("selective", ("none", "selective"), {"none", "selective"}, "none"),
        ("none", ("none", "selective", "every"), {"none", "selective", "every"}, None),
        ("every", ("none", "every"), {"every"}, None),  # recompute is what makes it fit
        ("every", ("every",), {"every"}, None),  # the space has nothing cheaper
        ("every_2", ("every", "every_2"), {"every", "every_2"}, None),  # every costs more
    ],
)
def test_the_cheapest_choice_that_recomputes_less_and_fits(mine, choices, fitting, want) -> None:
    full = {"model.n_layer": 48, RECOMPUTE: mine, "batch.micro_batch": 8}
    assert cheaper_that_fits(full, choices, fits=lambda c: c[RECOMPUTE] in fitting) == want


def test_recompute_costs_order_none_selective_then_by_blocks() -> None:
    order = ["every", "every_4", "none", "every_2", "selective"]
    ranked = sorted(order, key=lambda m: recompute_cost(m, 48))
    assert ranked == ["none", "selective", "every_4", "every_2", "every"]


def _space(ctx):
    return parse_space(
        {"batch.micro_batch": "choice(8, 32)", RECOMPUTE: "choice(none, every)"}, ctx
    )


def test_gpt2_xl_on_an_h100_recomputes_only_where_the_micro_batch_needs_it() -> None:
    ctx = xl_ctx()
    space = _space(ctx)
    refused = space.check({"batch.micro_batch": 8, RECOMPUTE: "every"})
    assert refused is not None and refused.startswith(
        "dominated: runtime.activation_checkpointing=every recomputes more than "
        "batch.micro_batch=8 needs: none is predicted to fit"
    ), refused
    assert space.check({"batch.micro_batch": 8, RECOMPUTE: "none"}) is None
    # 32 does not fit without recompute on 80 GB: recompute is what lets it run
    assert space.check({"batch.micro_batch": 32, RECOMPUTE: "every"}) is None


def test_a_dominated_point_still_fits_for_whoever_asks_only_that() -> None:
    """The starting config is measured whatever it is (the search passes dominance=False for it),
    and the guard's nearest fit asks whether a point runs, not whether it can win: a contender's
    curve run at the reference's micro-batch keeps its own recompute."""
    ctx = xl_ctx()
    space = _space(ctx)
    point = {"batch.micro_batch": 8, RECOMPUTE: "every"}
    assert space.check(point, dominance=False) is None
    assert check_point(point, ctx) is None  # the default: can it run
    fit = nearest_fit(point, ctx, keep_micro_batch=True)
    assert fit is not None and fit.changed == {} and fit.point[RECOMPUTE] == "every"


def test_an_out_of_memory_trial_without_recompute_keeps_the_recomputing_point() -> None:
    ctx = xl_ctx()
    _space(ctx)
    oom = {**XL, "batch.micro_batch": 8, "batch.grad_accum": 128, RECOMPUTE: "none"}
    ctx.note_ooms([OutOfMemory(trial=3, config=oom)])
    assert check_point({"batch.micro_batch": 8, RECOMPUTE: "every"}, ctx, dominance=True) is None


def test_nothing_is_dominated_where_the_memory_is_unknown_or_recompute_is_pinned() -> None:
    unknown = xl_ctx(device_memory_gib=None)
    _space(unknown)
    assert (
        check_point({"batch.micro_batch": 8, RECOMPUTE: "every"}, unknown, dominance=True) is None
    )
    pinned = xl_ctx(base={**XL, RECOMPUTE: "every"})
    parse_space({"batch.micro_batch": "choice(8, 32)"}, pinned)
    assert pinned.recompute_choices == ()
    assert check_point({"batch.micro_batch": 8}, pinned, dominance=True) is None


def test_a_value_only_dominated_points_have_stays_in_the_space() -> None:
    """Dead values are those no runnable point has: a dominated point runs (only the search skips
    it), so a starting config that recomputes where it need not still finds its value in the
    space and is measured."""
    ctx = xl_ctx()
    space = parse_space(
        {"batch.micro_batch": "choice(4, 8)", RECOMPUTE: "choice(none, every)"}, ctx
    )
    found = scan(space, ctx)
    assert dict(found.dominated) == {("every", "none"): 2}
    assert found.kept == 2 and RECOMPUTE not in found.dead_values
    (recompute,) = [p for p in drop_dead_values(space, found).params if p.key == RECOMPUTE]
    assert recompute.choices == ("none", "every")


@pytest.mark.parametrize(
    ("mine", "cheaper", "tail"),
    [
        ("every", "none", "and runs 1.00x the compute against 1.33x"),
        ("every", "every_2", "and runs 1.17x the compute against 1.33x"),
        (
            "selective",
            "none",
            "and reruns none of the LayerNorms, GELUs and adds that selective reruns",
        ),
    ],
)
def test_the_refusal_says_what_the_cheaper_point_saves(mine, cheaper, tail) -> None:
    full = {"model.n_layer": 48, RECOMPUTE: mine, "batch.micro_batch": 8}
    text = dominated_text(full, cheaper)
    assert text.startswith(f"dominated: runtime.activation_checkpointing={mine} recomputes ")
    assert text.endswith(tail), text


def test_a_dominated_starting_config_is_still_the_starting_point() -> None:
    """gpt2-xl at micro-batch 8 with full recompute on an H100: none fits there, so the search
    would never propose it, but it is what the user runs: it is measured first."""
    ctx = xl_ctx(base={**XL, RECOMPUTE: "every"})
    space = _space(ctx)
    start = baseline_params(space, ctx.base, device_type="cuda", bf16=True)
    assert start == {"batch.micro_batch": 8, RECOMPUTE: "every"}
    assert space.check(start) is not None  # what the search itself would refuse
