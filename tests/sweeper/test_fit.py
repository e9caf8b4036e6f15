"""The nearest point that fits (sweeper/space/fit.py): a table over GPT-2 XL on an 80 GB H100,
where the seed's eager micro-batch 16 is predicted at 77.7 GiB against 72.9 GiB usable."""

from __future__ import annotations

import pytest

from sweeper.space.fit import nearest_fit
from sweeper.space.math_keys import MATH_KEYS
from sweeper.space.memory import predict
from tests.sweeper.test_plan import XL, xl_ctx

SEED = {**XL, "batch.micro_batch": 16, "batch.grad_accum": 64, "runtime.dtype": "auto"}
CKPT = "runtime.activation_checkpointing"


def _ctx():
    return xl_ctx(base=SEED)


@pytest.mark.parametrize(
    ("point", "keep", "changed"),
    [
        # compiled mb16: 73.5 GiB (73.55 measured on an H200); compiled, selective saves what
        # `none` saves, so the cheapest recompute that fits is every other block
        ({"runtime.compile": "default"}, False, {CKPT: ("none", "every_2")}),
        (
            {"runtime.compile": "default", "batch.micro_batch": 8, "batch.grad_accum": 128},
            False,
            {},
        ),  # fits as it is (49.8 GiB): nothing changes
        ({}, False, {CKPT: ("none", "selective")}),  # eager mb16: selective reruns no matmul
        ({}, True, {CKPT: ("none", "selective")}),
        ({"runtime.dtype": "fp32"}, False, {CKPT: ("none", "every")}),  # fp32 mb16: 110.8 GiB
        (
            {"batch.micro_batch": 64, "batch.grad_accum": 16},
            False,  # no lever fits at 64
            {"batch.micro_batch": (64, 32), "batch.grad_accum": (16, 32), CKPT: ("none", "every")},
        ),
        ({"batch.micro_batch": 64, "batch.grad_accum": 16}, True, None),  # pinned: nothing fits
        ({CKPT: "every_2"}, False, {}),
    ],
)
def test_nearest_fit(point, keep, changed) -> None:
    ctx = _ctx()
    fit = nearest_fit(point, ctx, keep_micro_batch=keep)
    if changed is None:
        assert fit is None
        return
    assert fit is not None and fit.changed == changed
    full = {**ctx.base, **fit.point}
    assert predict(full, device_type="cuda", bf16_supported=True, device_gib=79.19).fits
    assert all(full.get(k) == {**ctx.base, **point}.get(k) for k in MATH_KEYS)  # the same math
    tokens = full["batch.micro_batch"] * full["batch.grad_accum"] * 1024
    assert tokens == 1_048_576  # the same tokens per step
    assert (fit.reason is None) == (not changed)
    if changed:
        assert "usable on NVIDIA H100 80GB HBM3" in fit.reason


def test_a_point_refused_for_another_reason_is_not_refitted() -> None:
    # fp32 has no flash kernel: no memory lever makes that point valid
    assert nearest_fit({"runtime.dtype": "fp32", "runtime.attention": "flash"}, _ctx()) is None


def test_the_text_names_each_change() -> None:
    fit = nearest_fit({"batch.micro_batch": 64, "batch.grad_accum": 16}, _ctx())
    assert fit.text() == (
        "batch.micro_batch 64 -> 32, batch.grad_accum 16 -> 32, "
        "runtime.activation_checkpointing none -> every"
    )


# -- the guard on a device where the starting config does not fit ------------------------------


class _Jobs:
    """A launcher that records each curve run's overrides and returns a complete result."""

    def __init__(self) -> None:
        self.jobs: list[list[str]] = []

    def launch(self, jobs: list[list[str]]) -> list[dict]:
        from tests.sweeper.test_guard_rules import curves_out

        self.jobs.extend(jobs)
        outs = []
        for job in jobs:
            seeds = next((int(o.split("=")[1]) for o in job if o.startswith("trial.seeds=")), 1)
            outs.append(
                curves_out([[10.0 - 0.1 * i - 0.001 * k for i in range(20)] for k in range(seeds)])
            )
        return outs


def test_the_guard_trains_the_reference_at_the_nearest_fit_and_pins_its_batches() -> None:
    from types import SimpleNamespace

    from sweeper.settings import settings_from
    from sweeper.space.search_space import parse_space
    from sweeper.tracking.protocol import NullTracker
    from sweeper.verify.guard import guard_entrants
    from sweeper.verify.winner import Candidate
    from tests.sweeper.test_guard_rules import _Study

    space = parse_space(
        {"runtime.dtype": "choice(fp32, bf16)", "runtime.compile": "choice(none, default)"}, _ctx()
    )
    ctx = SimpleNamespace(
        space=space,
        study=_Study(),
        jobs=_Jobs(),
        fixed=[],
        tracker=NullTracker(),
        budget=SimpleNamespace(verify_round_fits=lambda study, n, run_s=None: True),
        settings=settings_from({"guard.mode": "auto", "budget.max_wall_s": 0}),
    )
    params = {"runtime.dtype": "fp32", "runtime.compile": "none"}
    cands = {
        1: Candidate(
            key="1", params=params, overrides=[], values=[], simplicity=0, point=space.point(params)
        )
    }
    out = guard_entrants(ctx, cands, baseline=None, start=None)
    (ref_job, contender) = ctx.jobs.jobs  # the reference's two seeds run in one process
    assert "trial.seeds=2" in ref_job and "trial.seeds=1" in contender
    assert f"{CKPT}=selective" in ref_job  # 60.9 GiB, not 77.7
    assert f"{CKPT}=every" in contender  # fp32 at the reference's micro-batch 16 (110.8 GiB)
    assert not any(o.startswith("batch.micro_batch=") for o in contender)  # the seed's 16 stays
    assert "runtime.dtype=fp32" in contender
    rec = out.records[1]
    assert rec["verdict"] == "passed"
    assert "does not fit (predicted 77.7 GiB" in rec["reference_refit"]
    assert rec["refit"] == (f"at {CKPT} none -> every to fit the reference's micro-batch")
    assert out.notes[0].startswith("numerics guard: the starting config does not fit")
