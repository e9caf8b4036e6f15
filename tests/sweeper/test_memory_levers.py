"""The memory levers of issue 22 across the torch line: the memory model's tables for the chunked
loss and selective recompute (and one measured CPU step), the recompute factor, the sweep's space
(searched on a GPU, not on a CPU), the handoffs' gaps, and plan mode for gpt2-xl on an H100."""

from __future__ import annotations

import dataclasses

import pytest

from sweeper.plan.build import SweepPlan, build_plan
from sweeper.plan.memory_levers import lever_rows, plan_lever_lines
from sweeper.plan.plan_device import plan_device_facts
from sweeper.report.plan_text import format_plan
from sweeper.settings import settings_from
from sweeper.space.constraints import SpaceContext
from sweeper.space.limits import recompute_factor
from sweeper.space.params import drop_gpu_levers, gpu_memory_lever, parse_param
from sweeper.space.search_space import parse_space
from tests.sweeper.test_plan import H100, SETTINGS, xl_ctx
from tests.train.test_handoff import best_doc, changed
from train.core.chips import chip_for
from train.core.memory_model import (
    MemoryInputs,
    chunked_loss_bytes,
    fits,
    inputs_from_config,
    predict_memory,
)
from train.core.units import GIB
from train.export import handoff

SHAPES = {
    "small-cpu": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=50304),
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304),
    "gpt2-xl": dict(n_layer=48, n_head=25, n_embd=1600, block_size=1024, vocab_size=50304),
}
XL_MEMORY = chip_for(H100).memory_gib


def peak(model: str = "gpt2-xl", **knobs) -> float:
    base = {"micro_batch": 16, "dtype": "bf16", "grad_accum": 64}
    return predict_memory(MemoryInputs(**SHAPES[model], **{**base, **knobs})).peak_gib


# ---- the memory model --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "gib", "fit"),
    [
        ({}, 77.7, False),  # ran out of memory on the H100 (tests/train/test_memory_model.py)
        ({"loss": "chunked"}, 69.4, True),  # the chunked loss alone makes eager mb16 fit
        ({"activation_checkpointing": "selective"}, 60.9, True),
        ({"activation_checkpointing": "every_2"}, 57.6, True),
        ({"activation_checkpointing": "every"}, 37.4, True),
        # compiled: 73.55 GiB measured on an H200 (tests/train/test_memory_model.py), over the 72.9
        # usable here; the model said 57.5 before that measurement
        ({"compile": "default"}, 73.5, False),
        ({"compile": "default", "loss": "chunked"}, 68.4, True),
        ({"micro_batch": 32, "compile": "default"}, 120.9, False),  # 120.53 measured on the H200
        ({"micro_batch": 32, "compile": "default", "loss": "chunked"}, 109.9, False),
        (
            {"micro_batch": 32, "compile": "default", "activation_checkpointing": "every_2"},
            84.5,
            False,
        ),
        (
            {"micro_batch": 32, "compile": "default", "activation_checkpointing": "every"},
            48.1,
            True,
        ),
    ],
)
def test_gpt2_xl_on_an_h100(knobs, gib, fit) -> None:
    est = predict_memory(
        MemoryInputs(
            **SHAPES["gpt2-xl"], **{"micro_batch": 16, "dtype": "bf16", "grad_accum": 64, **knobs}
        )
    )
    assert est.peak_gib == pytest.approx(gib, abs=0.05)
    assert fits(est, XL_MEMORY) is fit


@pytest.mark.parametrize("model", list(SHAPES))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("loss", ["full", "chunked"])
def test_selective_lies_between_none_and_every(model, dtype, loss) -> None:
    none, selective, every = (
        peak(model, dtype=dtype, loss=loss, activation_checkpointing=ac)
        for ac in ("none", "selective", "every")
    )
    assert every < selective < none


@pytest.mark.parametrize("model", list(SHAPES))
@pytest.mark.parametrize("compile_mode", ["none", "default"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_chunked_loss_never_costs_memory(model, compile_mode, dtype) -> None:
    full = peak(model, compile=compile_mode, dtype=dtype)
    chunked = peak(model, compile=compile_mode, dtype=dtype, loss="chunked")
    assert chunked < full


def test_the_chunked_loss_holds_a_chunk_not_the_logits() -> None:
    inp = MemoryInputs(**SHAPES["gpt2-xl"], micro_batch=16, dtype="bf16", loss="chunked")
    tokens = 16 * 1024
    forward, backward, held = chunked_loss_bytes(inp, tokens)
    logits_fp32 = 4 * tokens * 50304
    assert held == 0  # nothing waits for the next micro-batch
    # the full loss holds 3x the fp32 logits at the start of backward (2a + 8 bytes a logit)
    assert forward < logits_fp32 / 2 and backward < logits_fp32 / 2
    # its parts are the held gradients (hidden states, weight) and one 1024-row chunk
    assert forward / GIB == pytest.approx(
        (
            2 * 1600 * tokens
            + 4 * 50304 * 1600
            + 6 * 1600 * tokens
            + 6 * 1024 * 50304
            + 2 * 50304 * 1600
            + 2 * 1600 * 1024
            + 2 * 50304 * 1600
        )
        / GIB
    )


def test_the_config_reads_the_loss_and_refuses_an_unknown_one() -> None:
    cfg = {
        **{f"model.{k}": v for k, v in SHAPES["gpt2"].items()},
        "batch.micro_batch": 8,
        "runtime.loss": "chunked",
        "runtime.activation_checkpointing": "selective",
    }
    inp = inputs_from_config(cfg)
    assert (inp.loss, inp.activation_checkpointing) == ("chunked", "selective")
    with pytest.raises(ValueError, match=r"runtime\.loss must be one of"):
        dataclasses.replace(inp, loss="fused")


def test_a_measured_cpu_step_matches_the_model(tmp_path) -> None:
    """tiny at vocab 50304, fp32, micro-batch 4: the chunked loss with selective recompute,
    measured by train/measure/memory_meter.py (scripts/bench/levers_memory.py does the grid)."""
    from scripts.bench import levers_memory as bench
    from train.data.synthetic import generate

    generate(tmp_path / "synthetic", num_tokens=50_000)
    row = bench.measure("tiny", 4, "chunked", "selective", tmp=tmp_path)
    assert row["predicted_mib"] == pytest.approx(row["measured_mib"], rel=0.02)


# ---- the compute, the space, the handoffs ------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "factor"),
    [
        ("none", 1.0),
        ("selective", 1.0),
        ("every_2", 1 + 24 / 48 / 3),
        ("every_3", 1 + 16 / 48 / 3),
        ("every", 4 / 3),
    ],
)
def test_recompute_factor(mode, factor) -> None:
    assert recompute_factor(mode, 48) == pytest.approx(factor)


@pytest.mark.parametrize(
    ("key", "value", "lever"),
    [
        ("runtime.loss", "chunked", True),
        ("runtime.loss", "full", False),
        ("runtime.activation_checkpointing", "selective", True),
        ("runtime.activation_checkpointing", "every_2", True),
        ("runtime.activation_checkpointing", "every_1", False),
        ("runtime.activation_checkpointing", "every", False),
        ("runtime.activation_checkpointing", "none", False),
        ("runtime.activation_checkpointing", "sometimes", False),
        ("runtime.compile", "default", False),
    ],
)
def test_which_values_are_gpu_memory_levers(key, value, lever) -> None:
    assert gpu_memory_lever(key, value) is lever


def _ctx(device_type: str, **base) -> SpaceContext:
    return SpaceContext(tokens_per_step=4096, block_size=64, device_type=device_type, base=base)


@pytest.mark.parametrize(
    ("device_type", "base", "spec", "kept"),
    [
        ("cpu", {}, "choice(none, selective, every_2, every)", ("none", "every")),
        (
            "cuda",
            {},
            "choice(none, selective, every_2, every)",
            ("none", "selective", "every_2", "every"),
        ),
        ("cuda", {"runtime.device": "cpu"}, "choice(none, selective, every)", ("none", "every")),
        ("cpu", {}, "choice(selective, every_2)", ("selective", "every_2")),  # asked for exactly
        ("cpu", {}, "selective", None),  # pinned: runs on a CPU as anywhere
    ],
)
def test_a_cpu_sweep_does_not_search_the_memory_levers(device_type, base, spec, kept) -> None:
    p = parse_param("runtime.activation_checkpointing", spec, _ctx(device_type, **base))
    if kept is None:
        assert (p.kind, p.value) == ("fixed", spec)
    else:
        assert p.choices == kept
    loss = parse_param("runtime.loss", "choice(full, chunked)", _ctx(device_type, **base))
    assert drop_gpu_levers(loss, _ctx(device_type, **base)) == loss
    gpu = device_type == "cuda" and not base
    assert loss.choices == (("full", "chunked") if gpu else ("full",))


@pytest.mark.parametrize(
    ("target", "change", "keys"),
    [
        ("nanogpt", {"runtime.loss": "chunked"}, ["runtime.loss"]),
        (
            "nanogpt",
            {"runtime.activation_checkpointing": "selective"},
            ["runtime.activation_checkpointing"],
        ),
        ("llmc", {"runtime.loss": "chunked"}, ["runtime.loss"]),
        (
            "llmc",
            {"runtime.activation_checkpointing": "selective"},
            ["runtime.activation_checkpointing"],
        ),
    ],
)
def test_the_handoffs_name_what_they_cannot_express(target, change, keys) -> None:
    doc = best_doc()
    doc["runtime"]["loss"] = "full"
    made = handoff(changed(doc, change), target)
    assert [line.split("=")[0] for line in made.lines] == keys
    if target == "llmc" and "runtime.loss" in change:
        assert "fused classifier" in made.lines[0]
    if target == "llmc" and "runtime.activation_checkpointing" in change:
        assert "no op-level policy" in made.lines[0]


# ---- plan mode ---------------------------------------------------------------------------------


GPU_QUICK = {
    "batch.micro_batch": {"split": True, "max": 32},
    "runtime.activation_checkpointing": "choice(none, selective, every_2, every)",
    "runtime.loss": "choice(full, chunked)",
    "runtime.compile": "choice(none, default)",
}


def _xl_quick_plan() -> SweepPlan:
    """Plan mode for gpt2-xl on an H100 over GPU_QUICK."""
    ctx = xl_ctx()
    return build_plan(
        space=parse_space(GPU_QUICK, ctx),
        ctx=ctx,
        device=plan_device_facts(H100, cpu_count=2),
        settings=settings_from(SETTINGS),
    )


def test_gpt2_xl_on_an_h100_starts_at_micro_batch_8_without_recompute() -> None:
    """The arithmetic's order: no recompute before recompute, then the largest micro-batch that
    the memory model fits. Compiled micro-batch 16 without recompute is dropped (73.5 GiB; 73.55
    measured on an H200, over the H100's 72.9 usable), so is 32; 8 fits compiled (49.8): so the
    first point the search measures is micro-batch 8 with no recompute, compiled. The chunked loss
    would fit 16 (68.4): that is the prior's lever point, not its first."""
    plan = _xl_quick_plan()
    first = plan.prior.points[0].params
    assert first["batch.micro_batch"] == 8
    assert first["runtime.activation_checkpointing"] == "none"
    assert first["runtime.compile"] == "default" and first["runtime.loss"] == "full"
    for g in plan.scan.dropped:  # nothing larger without recompute fits
        assert g.knobs["batch.micro_batch"] >= 16
    no_recompute_32 = [
        g
        for g in plan.scan.dropped
        if g.knobs["batch.micro_batch"] == 32
        and g.knobs["runtime.activation_checkpointing"] == "none"
    ]
    assert {g.knobs["runtime.loss"] for g in no_recompute_32} == {"full", "chunked"}
    # plan mode lists each lever with its predicted memory at that point
    text = format_plan(plan)
    assert "memory levers at micro_batch=8, compile=default, dtype=bf16" in text
    for lever, gib in [
        ("activation_checkpointing=none", 49.8),
        ("=selective", 49.8),
        ("=every_2", 40.7),
        ("=every ", 31.6),
        ("runtime.loss=chunked", 47.8),
    ]:
        line = next(x for x in text.splitlines() if x.startswith("  runtime.") and lever in x)
        assert f"{gib:.1f} GiB" in line, line


def test_the_levers_table_says_what_does_not_fit_and_is_empty_on_a_cpu() -> None:
    ctx = xl_ctx()
    space = parse_space(GPU_QUICK, ctx)
    eager_32 = {
        "batch.micro_batch": 32,
        "runtime.activation_checkpointing": "none",
        "runtime.loss": "full",
        "runtime.compile": "none",
    }
    rows = {(r.key, r.value): r for r in lever_rows(space, ctx, space.point(eager_32))}
    assert not rows["runtime.activation_checkpointing", "none"].fits
    assert rows["runtime.activation_checkpointing", "every"].fits
    assert rows["runtime.activation_checkpointing", "every"].compute == pytest.approx(4 / 3)
    cpu = dataclasses.replace(ctx, device_type="cpu", device_memory_gib=None)
    assert lever_rows(space, cpu, space.point(eager_32)) == []


def test_the_levers_table_is_at_the_prior_points_typed_point() -> None:
    """plan mode's table reads the prior's first Point (its knobs), not a params copy of it."""
    plan = _xl_quick_plan()
    first = plan.prior.points[0]
    heading = "memory levers at micro_batch={}, compile=default"
    assert plan_lever_lines(plan)[0].startswith(heading.format(8))
    moved = dataclasses.replace(first, point=first.point.with_knob("batch.micro_batch", 4))
    planted = dataclasses.replace(
        plan, prior=dataclasses.replace(plan.prior, points=[moved, *plan.prior.points[1:]])
    )
    assert plan_lever_lines(planted)[0].startswith(heading.format(4))
