"""No rule is defined twice: the sweeper refuses and predicts with the trainer's own torch-free
functions (train.core), never with copies of them."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

import sweeper.forecast.trial
import sweeper.plan.scan
import sweeper.space.constraints
import sweeper.space.limits
import sweeper.space.memory
import sweeper.space.params
import sweeper.space.search_space
import train.core.config
import train.core.flops
import train.core.memory_model
import train.core.meters
import train.core.rules
import train.explain.cli
import train.explain.floor
import train.measure.ceiling_cache
from sweeper.space.constraints import SpaceContext, check_point
from train.core.config import BatchConfig, Config, RuntimeConfig
from train.core.config_checks import check_combinations

REPO = Path(__file__).resolve().parents[2]
# The trainer's rules, by the module that states them. The sweeper may import these; it may not
# define a function or constant of the same name.
RULES = {
    train.core.rules: (
        "attention_dtype_conflict",
        "cudagraph_conflict",
        "dtype_unsupported",
        "grad_accum_for",
        "num_checkpointed_blocks",
        "parse_activation_checkpointing",
        "resolve_dtype_name",
        "sequences_per_device",
        "valid_splits",
        "CUDAGRAPH_MODES",
        "HALF_ONLY_CUDA_ATTENTION",
        "is_selective",
        "check_loss",
        "loss_chunk_rows",
        "SELECTIVE",
        "LOSS_MODES",
    ),
    train.core.config: ("COMPILE_MODES", "ATTENTION_BACKENDS"),
    train.core.flops: ("floor_step_time_s", "flops_per_token", "gpt2_num_params", "mfu"),
    train.core.meters: ("projects", "short_step"),
}


@pytest.mark.parametrize(
    ("user", "name", "owner"),
    [
        (sweeper.space.constraints, "cudagraph_conflict", train.core.rules),
        (sweeper.space.constraints, "dtype_unsupported", train.core.rules),
        (sweeper.space.constraints, "attention_dtype_conflict", train.core.rules),
        (sweeper.space.constraints, "grad_accum_for", train.core.rules),
        (sweeper.space.params, "valid_splits", train.core.rules),
        (sweeper.space.search_space, "resolve_dtype_name", train.core.rules),
        (sweeper.plan.scan, "resolve_dtype_name", train.core.rules),
        (sweeper.space.memory, "resolve_dtype_name", train.core.rules),
        (sweeper.space.limits, "resolve_dtype_name", train.core.rules),
        (sweeper.space.limits, "num_checkpointed_blocks", train.core.rules),
        (sweeper.space.limits, "is_selective", train.core.rules),
        (sweeper.space.params, "parse_activation_checkpointing", train.core.rules),
        (train.core.memory_model, "is_selective", train.core.rules),
        (train.core.memory_model, "loss_chunk_rows", train.core.rules),
        (sweeper.space.limits, "floor_step_time_s", train.core.flops),
        (sweeper.forecast.trial, "projects", train.core.meters),
        (sweeper.forecast.trial, "short_step", train.core.meters),
        (train.core.memory_model, "num_checkpointed_blocks", train.core.rules),
        (train.core.memory_model, "resolve_dtype_name", train.core.rules),
        (train.explain.floor, "floor_step_time_s", train.core.flops),
        (train.explain.cli, "newest_ceiling", train.measure.ceiling_cache),
    ],
)
def test_the_sweeper_uses_the_trainers_function(user, name, owner) -> None:
    assert getattr(user, name) is getattr(owner, name)


def _defined_names(path: Path) -> set[str]:
    """Functions, classes and module-level constants a file defines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


@pytest.mark.parametrize("path", sorted((REPO / "sweeper").rglob("*.py")), ids=str)
def test_the_sweeper_defines_no_rule_of_the_trainer(path: Path) -> None:
    rules = {name for names in RULES.values() for name in names}
    assert not _defined_names(path) & rules


def _trainer_refusal(compile_mode: str, dtype: str, accum: int, device_type: str) -> str | None:
    cfg = Config(
        batch=BatchConfig(tokens_per_step=4096, micro_batch=64 // accum, grad_accum=accum),
        runtime=RuntimeConfig(compile=compile_mode, dtype=dtype),
    )
    try:
        check_combinations(cfg, device_type=device_type)
    except ValueError as err:
        return str(err)
    return None


@pytest.mark.parametrize(
    ("compile_mode", "dtype", "accum", "device_type"),
    list(
        itertools.product(
            train.core.config.COMPILE_MODES, ("auto", "fp32", "fp16"), (1, 8), ("cpu", "cuda")
        )
    ),
)
def test_sweeper_and_trainer_refuse_the_same_points(compile_mode, dtype, accum, device_type):
    """CUDA graphs with grad_accum > 1 and fp16 on a CPU: refused by both, with one reason."""
    ctx = SpaceContext(
        tokens_per_step=4096,
        block_size=64,
        cpu_count=64,
        device_type=device_type,
        bf16_supported=True,
    )
    point = {
        "batch.micro_batch": 64 // accum,
        "batch.grad_accum": accum,
        "runtime.compile": compile_mode,
        "runtime.dtype": dtype,
    }
    swept = check_point(point, ctx, memory=False)
    trained = _trainer_refusal(compile_mode, dtype, accum, device_type)
    assert (swept is None) == (trained is None)
    if swept is not None:
        assert trained.startswith(swept)


def test_trial_limits_fall_back_to_the_trainers_trial_defaults() -> None:
    assert train.core.config.TrialConfig() == sweeper.forecast.trial.TRIAL_DEFAULTS


def test_the_ceiling_cache_has_one_path_rule() -> None:
    """The trainer writes the matmul-ceiling cache where the explain CLI reads it."""
    from train.measure import ceiling  # imports torch: the writer

    assert ceiling.default_cache_path is train.measure.ceiling_cache.default_cache_path
