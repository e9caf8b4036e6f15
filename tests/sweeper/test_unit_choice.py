"""The compile unit the prior tries first (sweeper/plan/unit_choice.py): block by block on a GPU
where the regions' host work hides behind a micro-batch's kernels, the whole model elsewhere."""

from __future__ import annotations

import pytest

from sweeper.plan.prior import prior_points
from sweeper.plan.unit_choice import HIDDEN_SHARE, REGION_HOST_S, first_unit, region_host_share
from sweeper.report.prior_text import point_text
from sweeper.space.search_space import parse_space
from tests.model_shapes import TINY
from tests.sweeper.test_plan import XL
from tests.sweeper.test_prior import XL_SPACE, xl_ctx

UNIT_SPACE = {**XL_SPACE, "runtime.compile_unit": "choice(model, block)"}
AT_LIMIT_S = 48 * REGION_HOST_S / HIDDEN_SHARE  # 48 layers' host work is exactly the hidden share


@pytest.mark.parametrize(
    ("device_type", "n_layer", "micro_step_s", "unit"),
    [
        ("cuda", 48, 0.68, "block"),  # gpt2-xl, micro-batch 32 on an H200: ~1% of its kernels
        ("cuda", 48, AT_LIMIT_S, "block"),  # at the limit
        ("cuda", 48, AT_LIMIT_S * 0.99, "model"),  # just past it
        ("cuda", 2, 1e-4, "model"),  # a tiny model's microsecond kernels
        ("cuda", 48, 0.0, "model"),  # no prediction
        ("cpu", 48, 10.0, "model"),  # the host is the device: the regions' work adds to the step
        ("mps", 48, 10.0, "model"),
    ],
)
def test_the_first_unit(device_type, n_layer, micro_step_s, unit) -> None:
    assert first_unit(device_type=device_type, n_layer=n_layer, micro_step_s=micro_step_s) == unit


def test_the_host_share_is_the_regions_work_over_the_kernels() -> None:
    # 28 ms a step at 48 layers x 4 micro-batches (the CPU profile): 7 ms a micro-batch at 48
    assert region_host_share(n_layer=48, micro_step_s=0.7) == pytest.approx(0.01)
    assert region_host_share(n_layer=24, micro_step_s=0.7) == pytest.approx(0.005)


def test_the_gpu_prior_compiles_gpt2_xl_block_by_block() -> None:
    ctx = xl_ctx("NVIDIA H200")
    space = parse_space(UNIT_SPACE, ctx)
    points = prior_points(space, ctx).points
    assert len(points) >= 2
    for p in points:  # the largest fit, one size up: each compiled block by block
        assert p.params["runtime.compile"] == "default"
        assert p.params["runtime.compile_unit"] == "block"
        assert space.check(p.params) is None
    assert "compile=default, compile_unit=block, attention=flash" in point_text(points[0])
    # the forecast prices a block's compile, not the whole model's
    whole = prior_points(parse_space(XL_SPACE, ctx), ctx).points[0]
    assert points[0].point.forecast.compile_s < whole.point.forecast.compile_s / 3


def test_a_small_model_on_a_gpu_keeps_the_whole_model() -> None:
    base = {**XL, **TINY, "model.name": "tiny", "batch.micro_batch": 8, "batch.grad_accum": 8}
    ctx = xl_ctx("NVIDIA H200", base=base, tokens_per_step=4096, block_size=64)
    space = parse_space(UNIT_SPACE, ctx)
    points = prior_points(space, ctx).points
    assert points and all(p.params["runtime.compile_unit"] == "model" for p in points)
