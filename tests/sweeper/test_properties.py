"""Property-based tests (hypothesis) of the pure parts, over many generated inputs:

- the space and its constraints never let an invalid config through: every point the sweeper
  accepts is a trainer config that validates, keeps the tokens per step (`check_batch`) and
  passes `check_combinations` on the device it was planned for;
- the FLOPs / MFU / floor / memory arithmetic is monotone in model size and tokens, and its
  units agree (MFU scales as 1/peak, the floor linearly with tokens, running at the floor is
  100% MFU);
- a trainer config round-trips through best.yaml (export, write, Hydra load) unchanged.

Examples are kept few (`max_examples`) so the file runs in well under a minute on 2 CPUs.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from sweeper.plan.prepare import flatten
from sweeper.report.best_yaml import best_config_document, write_best_yaml
from sweeper.space.constraints import SpaceContext
from sweeper.space.search_space import parse_space
from train.core.config import (
    ATTENTION_BACKENDS,
    COMPILE_MODES,
    DTYPE_CHOICES,
    BatchConfig,
    Config,
    ModelConfig,
)
from train.core.config_checks import check_batch, check_combinations
from train.core.flops import floor_step_time_s, flops_per_token, gpt2_num_params, mfu
from train.core.hooks import HooksConfig, hooks_of
from train.core.memory_model import MemoryInputs, predict_memory
from train.core.rules import resolve_dtype_name

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- the space and its constraints ------------------------------------------------------------


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if "." not in key:  # a top-level field (pinned_sections)
            out[key] = value
            continue
        section, name = key.split(".", 1)
        out.setdefault(section, {})[name] = value
    return out


def _trainer_config(flat: dict[str, Any]) -> Config:
    """The trainer's own validation of a flat point: the schema (types) and __post_init__."""
    merged = OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(_nested(flat)))
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, Config)
    return cfg


@st.composite
def spaces(draw: st.DrawFn) -> tuple[dict[str, Any], SpaceContext]:
    """A sweep's setup: pinned batch, device, base config and a search space over the knobs."""
    block = draw(st.sampled_from([16, 32, 64, 128]))
    tokens = block * draw(st.integers(1, 48))
    device_type, bf16 = draw(st.sampled_from([("cpu", False), ("cuda", True), ("cuda", False)]))
    base_cfg = Config(
        model=ModelConfig(block_size=block),
        batch=BatchConfig(tokens_per_step=tokens, micro_batch=tokens // block, grad_accum=1),
    )
    ctx = SpaceContext(
        tokens_per_step=tokens,
        block_size=block,
        cpu_count=draw(st.integers(1, 8)),
        device_type=device_type,
        bf16_supported=bf16,
        base=flatten(dataclasses.asdict(base_cfg)),
    )

    def some(values: tuple | list) -> st.SearchStrategy[list]:
        return st.lists(st.sampled_from(values), min_size=1, max_size=len(values), unique=True)

    micro = draw(
        st.one_of(
            st.just("split()"), st.lists(st.integers(1, 64), min_size=1, max_size=5, unique=True)
        )
    )
    space = {
        "batch.micro_batch": micro,
        "runtime.compile": draw(some(COMPILE_MODES)),
        "runtime.dtype": draw(some(DTYPE_CHOICES)),
        "runtime.attention": draw(some(ATTENTION_BACKENDS)),
        "data.num_workers": draw(some(list(range(0, 6)))),
        "checkpoint.every_steps": draw(some(list(range(0, 8)))),
    }
    return space, ctx


@FEW
@given(setup=spaces(), data=st.data())
def test_every_point_the_space_accepts_is_a_valid_trainer_config(setup, data) -> None:
    spec, ctx = setup
    try:
        space = parse_space(spec, ctx)
    except ValueError:  # a space refused up front emits nothing at all
        assume(False)
        return
    params = {p.key: data.draw(st.sampled_from(p.values())) for p in space.searched}
    if space.check(params) is not None:
        return  # refused: never launched
    cfg = _trainer_config({**ctx.base, **space.point(params)})
    check_batch(cfg.batch, block_size=cfg.model.block_size)
    dtype = resolve_dtype_name(
        cfg.runtime.dtype, device_type=ctx.device_type, bf16_supported=ctx.bf16_supported
    )
    check_combinations(cfg, device_type=ctx.device_type, dtype=dtype)
    assert cfg.batch.micro_batch * cfg.batch.grad_accum * cfg.model.block_size == (
        ctx.tokens_per_step
    )


@FEW
@given(setup=spaces())
def test_every_grid_point_is_a_valid_trainer_config(setup) -> None:
    spec, ctx = setup
    try:
        space = parse_space(spec, ctx)
    except ValueError:
        assume(False)
        return
    for params in space.grid_points()[:50]:
        cfg = _trainer_config({**ctx.base, **space.point(params)})
        dtype = resolve_dtype_name(
            cfg.runtime.dtype, device_type=ctx.device_type, bf16_supported=ctx.bf16_supported
        )
        check_combinations(cfg, device_type=ctx.device_type, dtype=dtype)


# ---- FLOPs, MFU, the floor --------------------------------------------------------------------

shapes = st.builds(
    dict,
    n_layer=st.integers(1, 48),
    n_head=st.sampled_from([1, 2, 4, 8, 12, 16]),
    head_dim=st.sampled_from([8, 16, 32, 64, 128]),
    vocab_size=st.integers(64, 60_000),
    seq_len=st.integers(1, 4096),
)


def _fpt(shape: dict[str, int], **change: int) -> float:
    s = {**shape, **change}
    return flops_per_token(
        n_layer=s["n_layer"],
        n_head=s["n_head"],
        n_embd=s["n_head"] * s["head_dim"],
        seq_len=s["seq_len"],
        vocab_size=s["vocab_size"],
    )


@FEW
@given(shape=shapes)
def test_flops_per_token_grows_with_every_dimension(shape: dict[str, int]) -> None:
    base = _fpt(shape)
    assert base > 0
    for key in ("n_layer", "head_dim", "vocab_size", "seq_len", "n_head"):
        assert _fpt(shape, **{key: shape[key] * 2}) > base, key
    # the 6N part is the parameters' share: never more than the whole
    n = gpt2_num_params(
        n_layer=shape["n_layer"],
        n_embd=shape["n_head"] * shape["head_dim"],
        vocab_size=shape["vocab_size"],
        block_size=shape["seq_len"],
    )
    assert 6 * n <= base


positive = st.floats(1e-3, 1e15, allow_nan=False, allow_infinity=False)


@FEW
@given(tps=positive, fpt=positive, peak=st.floats(1e6, 1e18), k=st.floats(1.5, 1e3))
def test_mfu_is_linear_in_throughput_and_inverse_in_peak(tps, fpt, peak, k) -> None:
    base = mfu(tokens_per_s=tps, flops_per_token=fpt, peak_flops=peak)
    assert base is not None and base > 0
    assert mfu(tokens_per_s=tps, flops_per_token=fpt, peak_flops=peak * k) == pytest.approx(
        base / k, rel=1e-9
    )
    assert mfu(tokens_per_s=tps * k, flops_per_token=fpt, peak_flops=peak) == pytest.approx(
        base * k, rel=1e-9
    )
    assert mfu(tokens_per_s=tps, flops_per_token=fpt, peak_flops=None) is None


@FEW
@given(tokens=st.integers(1, 10**9), fpt=positive, peak=st.floats(1e6, 1e18), k=st.integers(2, 64))
def test_the_floor_is_linear_in_tokens_and_is_100_percent_mfu(tokens, fpt, peak, k) -> None:
    floor = floor_step_time_s(tokens_per_step=tokens, flops_per_token=fpt, peak_flops=peak)
    assert floor > 0
    more = floor_step_time_s(tokens_per_step=tokens * k, flops_per_token=fpt, peak_flops=peak)
    assert more == pytest.approx(k * floor, rel=1e-9)
    # units: tokens/step / (s/step) = tokens/s, and at the floor's speed MFU is exactly 1
    at_floor = mfu(tokens_per_s=tokens / floor, flops_per_token=fpt, peak_flops=peak)
    assert at_floor == pytest.approx(1.0, rel=1e-9)


# ---- the memory model -------------------------------------------------------------------------

memory_inputs = st.builds(
    MemoryInputs,
    n_layer=st.integers(1, 24),
    n_head=st.just(4),
    n_embd=st.sampled_from([64, 128, 256, 512]),
    block_size=st.sampled_from([32, 64, 256, 1024]),
    vocab_size=st.sampled_from([512, 4096, 50304]),
    micro_batch=st.integers(1, 32),
    dtype=st.sampled_from(["fp32", "bf16"]),
    attention=st.sampled_from(["auto", "math"]),
    activation_checkpointing=st.sampled_from(["none", "every", "every_2"]),
    compile=st.sampled_from(["none", "default"]),
    device_type=st.sampled_from(["cuda", "cpu"]),
    grad_accum=st.integers(1, 4),
)


@FEW
@given(inp=memory_inputs)
def test_predicted_memory_grows_with_the_batch_and_the_model(inp: MemoryInputs) -> None:
    est = predict_memory(inp)
    assert est.peak_gib > 0 and math.isfinite(est.peak_gib)
    assert sum(est.parts.values()) == pytest.approx(est.peak_gib, rel=1e-9)
    for change in (
        {"micro_batch": inp.micro_batch * 2},
        {"n_layer": inp.n_layer + 1},
        {"n_embd": inp.n_embd * 2},
        {"vocab_size": inp.vocab_size * 2},
    ):
        bigger = predict_memory(dataclasses.replace(inp, **change))
        assert bigger.peak_gib >= est.peak_gib, change
    if inp.activation_checkpointing == "none":
        saved = predict_memory(dataclasses.replace(inp, activation_checkpointing="every"))
        assert saved.peak_gib <= est.peak_gib


# ---- best.yaml round trip ---------------------------------------------------------------------

# path text with the characters YAML and OmegaConf treat specially: `${` must stay literal
path_text = st.text(alphabet="abcXYZ019-_ .:${}", min_size=1, max_size=12).map(
    lambda s: "/tmp/" + s.strip()
)


@st.composite
def trainer_configs(draw: st.DrawFn) -> Config:
    n_head = draw(st.sampled_from([1, 2, 4]))
    block = draw(st.sampled_from([16, 32, 64]))
    micro = draw(st.integers(1, 8))
    accum = draw(st.integers(1, 8))
    cfg = Config()
    cfg.model = dataclasses.replace(
        cfg.model,
        n_layer=draw(st.integers(1, 6)),
        n_head=n_head,
        n_embd=n_head * draw(st.sampled_from([8, 16, 32])),
        block_size=block,
        dropout=draw(st.sampled_from([0.0, 0.1])),
        bias=draw(st.booleans()),
    )
    cfg.batch = BatchConfig(
        tokens_per_step=micro * accum * block, micro_batch=micro, grad_accum=accum
    )
    cfg.data = dataclasses.replace(cfg.data, dir=str(Path(draw(path_text)).resolve()))
    cfg.checkpoint = dataclasses.replace(
        cfg.checkpoint, dir=draw(path_text), every_steps=draw(st.integers(0, 100))
    )
    cfg.optim = dataclasses.replace(cfg.optim, lr=draw(st.floats(1e-5, 1e-1)), min_lr=0.0)
    dtype = draw(st.sampled_from(["auto", "fp32", "bf16"]))
    cfg.runtime = dataclasses.replace(
        cfg.runtime,
        seed=draw(st.integers(0, 2**31 - 1)),
        compile=draw(st.sampled_from(COMPILE_MODES)),
        dtype=dtype,
    )
    cfg.train = dataclasses.replace(cfg.train, resume=draw(st.sampled_from(["auto", "never"])))
    return cfg


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cfg=trainer_configs())
def test_a_config_round_trips_through_best_yaml(cfg: Config, tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    doc = best_config_document(
        trainer_config=dataclasses.asdict(cfg),
        metrics={"tokens_per_s": 1.0},
        fingerprint={},
        command="python sweep.py -m",
        sweep={"study": "s"},
    )
    write_best_yaml(tmp_path / "best.yaml", doc, header="round trip")
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        loaded = OmegaConf.to_object(compose("best"))
    assert isinstance(loaded, Config)
    assert loaded.pinned_sections == doc["pinned_sections"]  # the export records what it pinned
    assert set(loaded.pinned_sections) >= {"model", "batch", "runtime", "provenance"}
    loaded.provenance = {}
    loaded.pinned_sections = cfg.pinned_sections
    assert hooks_of(loaded) == HooksConfig()  # the suite's schema has hooks: none planted
    assert Config(**{f.name: getattr(loaded, f.name) for f in dataclasses.fields(Config)}) == cfg
