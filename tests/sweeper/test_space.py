"""Search-space parsing, the batch split, constraints, grids and overrides: pure tables."""

from __future__ import annotations

import itertools
import logging
import re
import subprocess
import sys

import optuna
import pytest
from omegaconf import OmegaConf

from sweeper.space.constraints import SpaceContext, check_point
from sweeper.space.search_space import SAMPLE_POINTS, parse_space
from tests.model_shapes import GPT2_XL


def make_ctx(**kw) -> SpaceContext:
    """4096 tokens per step of 64-token sequences: 64 sequences per step on one device."""
    args = {"tokens_per_step": 4096, "block_size": 64, "cpu_count": 2, "device_type": "cpu"}
    return SpaceContext(**{**args, **kw})


CUDA = {"device_type": "cuda", "bf16_supported": True}


# ---- the grammar ---------------------------------------------------------------------------------

GRAMMAR = [
    # spec, kind, choices, low, high, step, log, all values (None = continuous)
    (
        "choice(none,default,max-autotune-no-cudagraphs)",
        "categorical",
        ("none", "default", "max-autotune-no-cudagraphs"),
        None,
        None,
        None,
        False,
        ["none", "default", "max-autotune-no-cudagraphs"],
    ),
    (
        "none,default",
        "categorical",
        ("none", "default"),
        None,
        None,
        None,
        False,
        ["none", "default"],
    ),
    ([1, 2, 4], "categorical", (1, 2, 4), None, None, None, False, [1, 2, 4]),
    (
        ["a", None, True],
        "categorical",
        ("a", None, True),
        None,
        None,
        None,
        False,
        ["a", None, True],
    ),
    # Hydra's range excludes its stop, like Python's.
    ("range(0,5)", "int", (), 0, 4, 1, False, [0, 1, 2, 3, 4]),
    ("range(1,9,2)", "int", (), 1, 7, 2, False, [1, 3, 5, 7]),
    ("range(1,10,2)", "int", (), 1, 9, 2, False, [1, 3, 5, 7, 9]),
    ("range(5,0,-1)", "int", (), 1, 5, 1, False, [1, 2, 3, 4, 5]),
    ("range(0.1,0.6,0.2)", "float", (), 0.1, 0.5, 0.2, False, [0.1, 0.3, 0.5]),
    ("int(interval(1,8))", "int", (), 1, 8, 1, False, [1, 2, 3, 4, 5, 6, 7, 8]),
    ("interval(0.1,1.0)", "float", (), 0.1, 1.0, None, False, None),
    ("tag(log, interval(1e-4,1e-2))", "float", (), 1e-4, 1e-2, None, True, None),
    ("tag(log, int(interval(1,64)))", "int", (), 1, 64, 1, True, list(range(1, 65))),
    ("tag(log, range(1,4))", "int", (), 1, 3, 1, True, [1, 2, 3]),
]


@pytest.mark.parametrize(
    ("spec", "kind", "choices", "low", "high", "step", "log", "values"), GRAMMAR
)
def test_grammar_forms(spec, kind, choices, low, high, step, log, values):
    (param,) = parse_space({"optim.lr": spec}, make_ctx()).params
    assert (param.kind, param.choices, param.low, param.high, param.step, param.log) == (
        kind,
        choices,
        low,
        high,
        step,
        log,
    )
    assert param.values() == values


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        (4, 4),
        (0.5, 0.5),
        (True, True),
        (None, None),
        ("bf16", "bf16"),
        ("none", "none"),
        ("3", "3"),
        ("'quoted text'", "quoted text"),
        ("/data/my dir", "/data/my dir"),
    ],
)
def test_plain_scalar_is_fixed(spec, value):
    space = parse_space({"runtime.dtype": spec}, make_ctx())
    assert space.searched == ()
    assert space.fixed == {"runtime.dtype": value}


def test_range_stop_is_excluded_everywhere():
    # Hydra's own Optuna sweeper hands range(0,5)'s stop to Optuna as an inclusive high (0..5).
    space = parse_space({"data.num_workers": "range(0,5)"}, make_ctx(cpu_count=16))
    dist = space.distributions()["data.num_workers"]
    assert isinstance(dist, optuna.distributions.IntDistribution)
    assert (dist.low, dist.high, dist.step) == (0, 4, 1)
    assert space.grid() == {"data.num_workers": [0, 1, 2, 3, 4]}
    stepped = parse_space({"data.num_workers": "range(1,9,2)"}, make_ctx(cpu_count=16))
    assert stepped.distributions()["data.num_workers"].high == 7


def test_distributions_types_and_optuna_accepts_them():
    space = parse_space(
        {
            "runtime.compile": "choice(none,default)",
            "optim.lr": "tag(log, interval(1e-4,1e-2))",
            "optim.grad_clip": "range(0.5,1.6,0.5)",
            "runtime.tf32": [True, False],
        },
        make_ctx(),
    )
    dists = space.distributions()
    assert dists["runtime.compile"].choices == ("none", "default")
    assert dists["optim.lr"].log and dists["optim.lr"].step is None
    assert (dists["optim.grad_clip"].low, dists["optim.grad_clip"].high) == (0.5, 1.5)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask(fixed_distributions=dists)
    assert set(trial.params) == set(dists)
    assert len(space.to_overrides(trial.params)) == 4


def test_dictconfig_input_is_accepted():
    params = OmegaConf.create({"batch.micro_batch": {"split": True, "max": 8}, "runtime.seed": 1})
    space = parse_space(params, make_ctx())
    assert space.searched[0].choices == (1, 2, 4, 8)
    assert space.fixed == {"runtime.seed": 1}


# ---- the batch split -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "ctx_kw", "choices"),
    [
        ({"split": True}, {}, (1, 2, 4, 8, 16, 32, 64)),
        ("split()", {}, (1, 2, 4, 8, 16, 32, 64)),
        ({"split": True, "max": 64, "min": 1}, {}, (1, 2, 4, 8, 16, 32, 64)),
        ({"split": True, "max": 16}, {}, (1, 2, 4, 8, 16)),
        ("split(max=16)", {}, (1, 2, 4, 8, 16)),
        ({"split": True, "min": 4, "max": 20}, {}, (4, 8, 16)),
        ({"split": True}, {"world_size": 2}, (1, 2, 4, 8, 16, 32)),
        ({"split": True}, {"tokens_per_step": 64 * 12}, (1, 2, 3, 4, 6, 12)),
    ],
)
def test_split_enumerates_only_valid_micro_batches(spec, ctx_kw, choices):
    ctx = make_ctx(**ctx_kw)
    (param,) = parse_space({"batch.micro_batch": spec}, ctx).params
    assert param.kind == "categorical" and param.split
    assert param.choices == choices
    per_device = ctx.tokens_per_step // (ctx.block_size * ctx.world_size)
    assert all(per_device % mb == 0 for mb in param.choices)


@pytest.mark.parametrize(
    ("micro_batch", "ctx_kw", "grad_accum"),
    [(4, {}, 16), (64, {}, 1), (1, {}, 64), (4, {"world_size": 2}, 8)],
)
def test_grad_accum_is_derived_in_overrides(micro_batch, ctx_kw, grad_accum):
    space = parse_space({"batch.micro_batch": {"split": True}}, make_ctx(**ctx_kw))
    assert space.to_overrides({"batch.micro_batch": micro_batch}) == [
        f"batch.micro_batch={micro_batch}",
        f"batch.grad_accum={grad_accum}",
    ]
    assert space.check({"batch.micro_batch": micro_batch}) is None


def test_overrides_order_fixed_and_derived():
    space = parse_space(
        {
            "runtime.compile": "choice(none,default)",
            "batch.micro_batch": "split()",
            "data.num_workers": "range(0,3)",
            "runtime.dtype": "bf16",
        },
        make_ctx(),
    )
    point = {"runtime.compile": "default", "batch.micro_batch": 4, "data.num_workers": 2}
    assert space.to_overrides(point) == [
        "runtime.compile=default",
        "batch.micro_batch=4",
        "batch.grad_accum=16",
        "data.num_workers=2",
        "runtime.dtype=bf16",
    ]
    with pytest.raises(ValueError, match=r"missing \['data.num_workers'\]"):
        space.to_overrides({"runtime.compile": "none", "batch.micro_batch": 4})
    with pytest.raises(ValueError, match=r"unknown \['optim.lr'\]"):
        space.to_overrides({**point, "optim.lr": 1.0})


def test_plain_micro_batch_choice_flags_invalid_split():
    space = parse_space({"batch.micro_batch": "choice(3,4)"}, make_ctx())
    assert space.to_overrides({"batch.micro_batch": 4})[-1] == "batch.grad_accum=16"
    assert space.to_overrides({"batch.micro_batch": 3}) == ["batch.micro_batch=3"]
    assert "invalid split" in space.check({"batch.micro_batch": 3})
    assert space.grid_points() == [{"batch.micro_batch": 4}]


# ---- data workers bounded by the CPU count ------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "cpus", "values"),
    [
        ("range(0,5)", 2, [0, 1, 2]),
        ("int(interval(0,16))", 4, [0, 1, 2, 3, 4]),
        ("range(0,9,3)", 4, [0, 3]),
        ("choice(0,1,2,4,8)", 2, [0, 1, 2]),
        ([0, 2, 4], 8, [0, 2, 4]),
    ],
)
def test_workers_are_clamped_to_cpu_count(spec, cpus, values, caplog):
    with caplog.at_level(logging.INFO, logger="sweeper.space.params"):
        space = parse_space({"data.num_workers": spec}, make_ctx(cpu_count=cpus))
    assert space.grid() == {"data.num_workers": values}
    clamped = len(values) < len(
        parse_space({"data.num_workers": spec}, make_ctx(cpu_count=64)).grid()["data.num_workers"]
    )
    assert ("dropped" in caplog.text) == clamped


@pytest.mark.parametrize("spec", ["range(4,8)", "choice(4,8)", [3]])
def test_workers_all_above_cpu_count_is_an_error(spec):
    with pytest.raises(ValueError, match=r"data.num_workers.*exceeds the 2 CPUs.*<= 2"):
        parse_space({"data.num_workers": spec}, make_ctx(cpu_count=2))


# ---- constraints ---------------------------------------------------------------------------------

BASE = {
    "batch.micro_batch": 8,
    "batch.grad_accum": 8,
    "runtime.compile": "none",
    "runtime.dtype": "auto",
    "runtime.device": "auto",
    "data.num_workers": 0,
    "data.prefetch_factor": 2,
}

RULES = [
    # point, ctx overrides, reason (regex) or None
    ({"runtime.compile": "reduce-overhead", "batch.micro_batch": 32}, CUDA, r"#169545.*#96693"),
    ({"runtime.compile": "max-autotune"}, CUDA, r"max-autotune captures CUDA graphs.*grad_accum=8"),
    ({"runtime.compile": "max-autotune", "batch.micro_batch": 64}, CUDA, None),
    ({"runtime.compile": "max-autotune-no-cudagraphs"}, CUDA, None),
    ({"runtime.compile": "reduce-overhead"}, {}, None),  # no CUDA graphs on CPU
    ({"runtime.dtype": "fp16"}, {}, r"fp16 is not supported on CPU"),
    ({"runtime.dtype": "fp16"}, CUDA, None),
    ({"runtime.dtype": "fp16", "runtime.device": "cpu"}, CUDA, r"fp16.*CPU"),
    ({"runtime.dtype": "bf16"}, {"device_type": "cuda"}, r"bf16 on a CUDA device without"),
    ({"runtime.dtype": "bf16"}, CUDA, None),
    ({"runtime.dtype": "bf16"}, {}, None),
    ({"runtime.device": "cuda"}, {}, r"no CUDA device"),
    ({"data.prefetch_factor": 8, "data.num_workers": 0}, {}, None),  # harmless
    ({"data.num_workers": 3}, {}, r"num_workers=3 exceeds the 2 CPUs"),
    ({"data.num_workers": 2}, {}, None),
    ({"batch.micro_batch": 3}, {}, r"invalid split.*micro_batch=3 x batch.grad_accum=None"),
    ({"batch.micro_batch": 4, "batch.grad_accum": 4}, {}, r"invalid split.*4 x .*4 .*!= .*4096"),
    ({"batch.micro_batch": 4}, {}, None),
    ({"model.block_size": 128}, {}, r"invalid split.*block_size=128"),
    ({"model.block_size": 128, "batch.micro_batch": 4}, {}, None),  # derived for the new block
    ({"runtime.attention": "efficient"}, {}, r"attention=efficient has no CPU kernel"),
    ({"runtime.attention": "cudnn"}, {}, r"attention=cudnn has no CPU kernel"),
    ({"runtime.attention": "flash"}, {}, None),
    ({"runtime.attention": "efficient"}, CUDA, None),
    # flash and cuDNN attention take fp16/bf16 only on CUDA (train.core.config's rule)
    (
        {"runtime.attention": "flash", "runtime.dtype": "fp32"},
        CUDA,
        r"attention=flash has no fp32 kernel on CUDA",
    ),
    ({"runtime.attention": "cudnn", "runtime.dtype": "fp32"}, CUDA, r"cudnn has no fp32 kernel"),
    ({"runtime.attention": "efficient", "runtime.dtype": "fp32"}, CUDA, None),
    ({"runtime.attention": "flash"}, CUDA, None),  # auto is bf16 here
    ({"runtime.attention": "flash"}, {"device_type": "cuda"}, r"resolves to fp32"),
    ({"runtime.attention": "flash", "runtime.dtype": "fp32"}, {}, None),  # the CPU's flash is
    # a save must fall inside the measured window, which may stop at trial.min_steps
    (
        {"checkpoint.every_steps": 10, "trial.min_steps": 6},
        {},
        r"every_steps=10 > trial.min_steps=6.*use an interval <= 6",
    ),
    ({"checkpoint.every_steps": 6, "trial.min_steps": 6}, {}, None),
    ({}, {}, None),
]


@pytest.mark.parametrize(("point", "ctx_kw", "reason"), RULES)
def test_check_point_rules(point, ctx_kw, reason):
    got = check_point(point, make_ctx(base=BASE, **ctx_kw))
    if reason is None:
        assert got is None
    else:
        assert got is not None
        assert re.search(reason, got), got


def test_unsafe_base_value_applies_to_searched_points():
    # compile is not searched, but the base config's CUDA-graph mode still meets grad_accum.
    ctx = make_ctx(base={**BASE, "runtime.compile": "reduce-overhead"}, **CUDA)
    space = parse_space({"batch.micro_batch": "split()"}, ctx)
    assert space.grid_points() == [{"batch.micro_batch": 64}]
    assert space.feasible_count() == 1


def test_empty_space_is_refused_before_anything_runs():
    params = {
        "runtime.compile": "choice(reduce-overhead,max-autotune)",
        "batch.micro_batch": {"split": True, "max": 32},
    }
    space = parse_space(params, make_ctx(base=BASE, **CUDA))
    assert space.feasible_count() == 0
    assert space.grid_points() == []
    with pytest.raises(ValueError, match=r"search space has no valid point: .*#169545"):
        space.require_feasible()
    # The same space is fine on CPU, where nothing captures CUDA graphs.
    cpu_space = parse_space(params, make_ctx(base=BASE))
    cpu_space.require_feasible()
    assert cpu_space.feasible_count() == 2 * 6


def test_feasibility_of_a_continuous_space_is_sampled():
    params = {
        "optim.lr": "tag(log, interval(1e-4,1e-2))",
        "runtime.compile": "choice(none,reduce-overhead)",
    }
    space = parse_space(params, make_ctx(base=BASE, **CUDA))
    count = space.feasible_count()
    # about half draw CUDA graphs with the base's grad_accum > 1
    assert 0.4 * SAMPLE_POINTS < count < 0.6 * SAMPLE_POINTS
    assert space.feasible_count() == count  # seeded: the same answer every time
    fixed_bad = parse_space(
        {"optim.lr": "interval(0.1,1.0)", "runtime.dtype": "fp16"}, make_ctx(base=BASE)
    )
    with pytest.raises(ValueError, match=r"no valid point: runtime.dtype=fp16 .*\(5000x\)"):
        fixed_bad.require_feasible()


def test_feasible_count_samples_past_the_limit():
    space = parse_space(
        {"data.num_workers": "range(0,3)", "runtime.seed": "range(0,100)"}, make_ctx(base=BASE)
    )
    assert space.feasible_count(limit=1000) == 300
    assert space.feasible_count(limit=10) == SAMPLE_POINTS  # all sampled points are fine


# ---- grids ---------------------------------------------------------------------------------------


def test_grid_and_grid_points():
    space = parse_space(
        {
            "runtime.compile": "choice(none,reduce-overhead)",
            "batch.micro_batch": "split(min=16)",
            "optim.grad_clip": "range(0.5,1.1,0.5)",
            "runtime.dtype": "bf16",
        },
        make_ctx(base=BASE, **CUDA),
    )
    grid = space.grid()
    assert grid == {
        "runtime.compile": ["none", "reduce-overhead"],
        "batch.micro_batch": [16, 32, 64],
        "optim.grad_clip": [0.5, 1.0],
    }
    points = space.grid_points()
    # reduce-overhead survives only with micro_batch 64 (grad_accum 1).
    assert len(points) == (3 + 1) * 2
    assert {
        "runtime.compile": "reduce-overhead",
        "batch.micro_batch": 64,
        "optim.grad_clip": 1.0,
    } in points
    assert all(space.check(p) is None for p in points)
    assert len(points) == space.feasible_count()

    # Optuna's GridSampler, driven by an in-memory study, visits every point of the grid once (and
    # then stops the study); the feasible ones among them are exactly grid_points()
    def objective(trial: optuna.Trial) -> float:
        for key, values in grid.items():
            trial.suggest_categorical(key, values)
        return 0.0

    study = optuna.create_study(sampler=optuna.samplers.GridSampler(grid, seed=0))
    study.optimize(objective, n_trials=100)
    visited = [tuple(t.params[k] for k in grid) for t in study.trials]
    assert sorted(visited, key=repr) == sorted(itertools.product(*grid.values()), key=repr)
    feasible = [dict(zip(grid, v, strict=True)) for v in visited]
    feasible = [p for p in feasible if space.check(p) is None]
    assert sorted(feasible, key=repr) == sorted(points, key=repr)


def test_grid_refuses_continuous_floats():
    space = parse_space({"optim.lr": "interval(1e-4,1e-2)"}, make_ctx())
    with pytest.raises(ValueError, match=r"optim.lr.*continuous.*choice\(\.\.\.\) or range"):
        space.grid()


def test_grid_points_refuses_a_huge_grid():
    space = parse_space(
        {"runtime.seed": "range(0,1000)", "optim.warmup_steps": "range(0,1000)"}, make_ctx()
    )
    with pytest.raises(ValueError, match=r"1000000 points, more than 100000"):
        space.grid_points()


def test_empty_params_is_one_point():
    space = parse_space({}, make_ctx(base=BASE))
    assert space.grid() == {} and space.grid_points() == [{}]
    assert space.feasible_count() == 1 and space.to_overrides({}) == []


# ---- errors --------------------------------------------------------------------------------------

ERRORS = [
    ({"train.max_steps": "range(1,5)"}, r"train.max_steps.*unknown key.*must start with.*model\."),
    ({"lr": 0.1}, r"lr.*unknown key"),
    ({"runtime.compile": "choice()"}, r"runtime.compile.*empty choice"),
    ({"runtime.compile": []}, r"runtime.compile.*empty choice.*at least one"),
    ({"runtime.compile": "choice(a"}, r"runtime.compile.*'choice\(a'.*not a valid sweep"),
    ({"runtime.compile": "foo(1)"}, r"not a valid sweep.*Unknown function 'foo'"),
    ({"runtime.compile": [{"a": 1}]}, r"choices must be str/int/float/bool/null"),
    ({"runtime.compile": "glob(*)"}, r"Glob values are not supported"),
    ({"optim.lr": "interval(5,1)"}, r"optim.lr.*low 5.0 > high 1.0.*interval\(1.0,5.0\)"),
    ({"optim.lr": "tag(log, interval(0,1))"}, r"optim.lr.*log scale needs low > 0"),
    ({"optim.lr": "tag(log, interval(-1.0,1.0))"}, r"log scale needs low > 0"),
    ({"runtime.seed": "tag(log, range(1,10,2))"}, r"log scale cannot have a step"),
    ({"runtime.seed": "range(5,5)"}, r"range is empty.*range\(0,5\) gives 0,1,2,3,4"),
    ({"runtime.seed": "range(0,5,0)"}, r"range step is 0"),
    ({"runtime.compile": "tag(log, choice(a,b))"}, r"log applies to interval\(\) and range\(\)"),
    (
        {"batch.grad_accum": "choice(1,2)"},
        r"batch.grad_accum.*search batch.micro_batch with split: true and grad_accum follows",
    ),
    ({"batch.grad_accum": 4, "batch.micro_batch": "split()"}, r"grad_accum cannot be searched"),
    (
        {"batch.micro_batch": {"split": True, "min": 128}},
        r"batch.micro_batch.*split has no valid value in \[128, 64\].*\[1, 2, 4, 8, 16, 32, 64\]",
    ),
    ({"batch.micro_batch": {"split": True, "min": 3, "max": 3}}, r"no valid value in \[3, 3\]"),
    ({"optim.lr": {"split": True}}, r"optim.lr.*split applies only to batch.micro_batch"),
    ({"batch.micro_batch": {"split": False}}, r"mapping spec must be the batch split"),
    ({"batch.micro_batch": {"split": True, "maxx": 4}}, r"only positive integers min and max"),
    ({"batch.micro_batch": {"split": True, "min": 0}}, r"only positive integers min and max"),
    ({"batch.micro_batch": "split(max=x)"}, r"cannot read split's arguments"),
    (
        {"batch.micro_batch": "split()", "model.block_size": "choice(64,128)"},
        r"model.block_size.*remove model.block_size from the search space",
    ),
    (
        {"batch.micro_batch": "split()", "batch.tokens_per_step": [4096, 8192]},
        r"remove batch.tokens_per_step",
    ),
]


@pytest.mark.parametrize(("params", "match"), ERRORS)
def test_parse_errors(params, match):
    with pytest.raises(ValueError, match=match):
        parse_space(params, make_ctx())


def test_split_needs_tokens_divisible_by_block():
    with pytest.raises(ValueError, match=r"tokens_per_step=4000 is not a multiple.*multiple of 64"):
        parse_space({"batch.micro_batch": "split()"}, make_ctx(tokens_per_step=4000))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"block_size": 0}, r"SpaceContext.block_size must be a positive integer, got 0"),
        ({"device_type": "mps"}, r"SpaceContext.device_type must be cpu or cuda, got 'mps'"),
    ],
)
def test_context_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        make_ctx(**kw)


# ---- simplicity ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "distance"),
    [
        ({"runtime.compile": "none", "batch.micro_batch": 8, "runtime.tf32": True}, 0),
        ({"runtime.compile": "default", "batch.micro_batch": 8, "runtime.tf32": True}, 1),
        ({"runtime.compile": "default", "batch.micro_batch": 4, "runtime.tf32": False}, 3),
    ],
)
def test_defaults_distance(params, distance):
    space = parse_space(
        {
            "runtime.compile": "choice(none,default)",
            "batch.micro_batch": "split()",
            "runtime.tf32": [True, False],
            "runtime.dtype": "bf16",
        },
        make_ctx(),
    )
    base = {
        "runtime.compile": "none",
        "batch.micro_batch": 8,
        "batch.grad_accum": 8,
        "runtime.tf32": True,
        "runtime.dtype": "fp32",
    }
    # Fixed keys and the derived grad_accum never count: only what the search chose.
    assert space.defaults_distance(params, base) == distance


def test_sweeper_space_does_not_import_torch():
    code = "import sys, sweeper.space.search_space; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("spec", "ctx_kw", "kept"),
    [
        ("choice(auto,flash,efficient,cudnn,math)", {}, ("auto", "flash", "math")),
        (
            "choice(auto,flash,efficient,cudnn,math)",
            CUDA,
            ("auto", "flash", "efficient", "cudnn", "math"),
        ),
        ("choice(fp32,bf16,fp16)", {}, ("fp32", "bf16")),
        ("choice(fp32,bf16,fp16)", CUDA, ("fp32", "bf16", "fp16")),
        ("choice(fp32,bf16)", {"device_type": "cuda", "bf16_supported": False}, ("fp32",)),
    ],
)
def test_choices_the_device_cannot_run_are_dropped_before_sampling(spec, ctx_kw, kept, caplog):
    key = "runtime.attention" if "flash" in spec else "runtime.dtype"
    with caplog.at_level(logging.WARNING, logger="sweeper.space.params"):
        (param,) = parse_space({key: spec}, make_ctx(base=BASE, **ctx_kw)).params
    assert param.choices == kept
    assert ("dropped" in caplog.text) == (len(kept) < spec.count(",") + 1)


def test_dropped_choices_are_folded_by_reason_from_the_rules_parts(caplog):
    """A rule's refusal names `key=value`; the folded line lists the values and says the reason
    once, composed from the refusal's parts (nothing is cut from a sentence)."""
    with caplog.at_level(logging.WARNING, logger="sweeper.space.params"):
        parse_space(
            {"runtime.attention": "choice(auto,efficient,cudnn,fa3,math)"}, make_ctx(base=BASE)
        )
    assert (
        "runtime.attention: dropped 3 of 5 choices: efficient, cudnn, fa3\n"
        "  efficient, cudnn: has no CPU kernel\n"
        "  fa3: is a CUDA flash attention implementation and this run's device is cpu; use "
        "runtime.attention=auto (or flash/math)"
    ) in caplog.text


def test_dropped_text_says_a_refusal_by_its_reason_and_a_plain_reason_whole():
    from sweeper.space.params import dropped_text
    from train.core.rules import Refusal

    reasons = {
        "fa3": Refusal(key="runtime.attention", value="fa3", reason="none here", sep=": "),
        "/x": "/x does not exist here",
        "math": None,
    }
    assert dropped_text("k", reasons) == (
        "k: dropped 2 of 3 choices: fa3, /x\n  fa3: none here\n  /x: /x does not exist here"
    )
    assert str(reasons["fa3"]) == "runtime.attention=fa3: none here"


def test_a_choice_list_the_device_cannot_run_at_all_is_an_error():
    with pytest.raises(ValueError, match=r"runtime.attention.*no choice runs here.*no CPU kernel"):
        parse_space({"runtime.attention": "choice(efficient,cudnn)"}, make_ctx(base=BASE))


def test_nothing_is_dropped_when_the_device_itself_is_searched():
    space = parse_space(
        {"runtime.device": "choice(cpu,cuda)", "runtime.dtype": "choice(fp32,fp16)"},
        make_ctx(base=BASE, **CUDA),
    )
    assert next(p for p in space.params if p.key == "runtime.dtype").choices == ("fp32", "fp16")


# ---- memory rules (sweeper/space/memory.py) ------------------------------------------------------

XL = {
    **GPT2_XL,
    "batch.tokens_per_step": 1_048_576,
    "batch.micro_batch": 8,
    "batch.grad_accum": 128,
    "runtime.device": "auto",
    "runtime.dtype": "bf16",
    "runtime.compile": "none",
    "runtime.attention": "auto",
    "runtime.activation_checkpointing": "none",
    "data.num_workers": 1,
}
H100_GIB = 81090 / 1024  # train/core/chips.py, the H100 SXM's memory_gib


def xl_ctx(**kw) -> SpaceContext:
    args = {
        "tokens_per_step": 1_048_576,
        "block_size": 1024,
        "cpu_count": 2,
        "base": XL,
        "device_name": "NVIDIA H100 80GB HBM3",
        "device_memory_gib": H100_GIB,
        **CUDA,
    }
    return SpaceContext(**{**args, **kw})


@pytest.mark.parametrize(
    ("point", "ctx_kw", "reason"),
    [
        # real H100 facts: micro-batch 8 fits (52.3 GiB), 16 ran out of memory, 16 with
        # activation checkpointing fits (37.6 GiB)
        ({"batch.micro_batch": 8}, {}, None),
        (
            {"batch.micro_batch": 16},
            {},
            r"^predicted 77\.7 GiB > 79\.19 GiB x \(1 - 0\.08\) "
            r"usable on NVIDIA H100 80GB HBM3$",
        ),
        ({"batch.micro_batch": 16, "runtime.activation_checkpointing": "every"}, {}, None),
        # no device memory known (a CPU, no plan device): no memory refusal
        ({"batch.micro_batch": 16}, {"device_memory_gib": None}, None),
        # the H200's 139.8 GiB
        ({"batch.micro_batch": 16}, {"device_memory_gib": 143156 / 1024}, None),
    ],
)
def test_the_memory_model_refuses_points_that_cannot_fit(point, ctx_kw, reason):
    got = check_point(point, xl_ctx(**ctx_kw))
    if reason is None:
        assert got is None
    else:
        assert got is not None and re.search(reason, got), got


def test_memory_false_leaves_the_memory_rules_out():
    assert check_point({"batch.micro_batch": 16}, xl_ctx(), memory=False) is None


def test_grid_and_feasibility_respect_the_memory_model():
    space = parse_space({"batch.micro_batch": "choice(4, 8, 16, 32)"}, xl_ctx())
    assert space.grid_points() == [{"batch.micro_batch": 4}, {"batch.micro_batch": 8}]
    with pytest.raises(ValueError, match=r"no valid point: predicted .* GiB > "):
        parse_space({"batch.micro_batch": "choice(16, 32)"}, xl_ctx()).require_feasible()


OOM_AT_8 = {**XL, "batch.micro_batch": 8, "hooks.fault": "none"}


@pytest.mark.parametrize(
    ("config", "device_type", "refused"),
    [
        ({"batch.micro_batch": 16}, "cuda", True),  # larger, same knobs
        ({"batch.micro_batch": 8}, "cuda", True),  # equal
        ({"batch.micro_batch": 4}, "cuda", False),  # smaller may fit
        ({"batch.micro_batch": 16, "runtime.activation_checkpointing": "every"}, "cuda", False),
        ({"batch.micro_batch": 16, "runtime.dtype": "fp32"}, "cuda", False),
        ({"batch.micro_batch": 16, "hooks.fault": "oom"}, "cuda", False),
        # DataLoader workers live in host memory: no difference to a GPU's out-of-memory ...
        ({"batch.micro_batch": 16, "data.num_workers": 2}, "cuda", True),
        # ... but on a CPU they share the memory that ran out
        ({"batch.micro_batch": 16, "data.num_workers": 2}, "cpu", False),
    ],
)
def test_an_out_of_memory_trial_rules_out_larger_micro_batches(config, device_type, refused):
    from sweeper.space.memory import OutOfMemory, oom_reason

    ooms = [OutOfMemory(trial=7, config=OOM_AT_8)]
    got = oom_reason({**OOM_AT_8, **config}, ooms, device_type=device_type)
    assert (got is not None) == refused
    if refused:
        assert got.startswith("trial 7 ran out of memory at batch.micro_batch=8")


def test_a_sweep_context_learns_from_its_out_of_memory_trials():
    ctx = xl_ctx(device_memory_gib=None)
    space = parse_space({"batch.micro_batch": "choice(2, 4, 8)"}, ctx)
    assert space.check({"batch.micro_batch": 8}) is None
    space.record_oom(3, space.point({"batch.micro_batch": 4}))
    assert ctx.ooms[0].config == {**XL, **space.point({"batch.micro_batch": 4})}
    assert space.check({"batch.micro_batch": 8}).startswith("trial 3 ran out of memory")
    assert space.check({"batch.micro_batch": 2}) is None


def test_checkpoint_targets_this_machine_lacks_are_dropped(tmp_path, caplog):
    here, missing = tmp_path / "ckpt", tmp_path / "no" / "such"
    spec = [str(here), str(missing), "checkpoints"]
    with caplog.at_level(logging.WARNING, logger="sweeper.space.params"):
        (param,) = parse_space({"checkpoint.dir": spec}, make_ctx()).params
    assert param.choices == (str(here), "checkpoints")
    assert f"checkpoint.dir: dropped 1 of 3 choices: {missing}\n  {missing}: " in caplog.text
    with pytest.raises(ValueError, match=r"checkpoint.dir.*no target is writable here"):
        parse_space({"checkpoint.dir": [str(missing)]}, make_ctx())
