"""Compose a trainer config the way `python -m train.trial` does, for the benchmarks."""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from train.core.config import Config
from train.core.paths import PROJECT_DIR

CONF_DIR = PROJECT_DIR / "conf"


def compose_config(overrides: list[str]) -> Config:
    """conf/train.yaml + overrides -> a validated Config, as `python -m train.trial` builds it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        dcfg = compose("train", overrides=overrides)
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, Config)
    return cfg


def cpu_trial_overrides(
    tmp: Path,
    *,
    model: str,
    micro_batch: int,
    grad_accum: int,
    block_size: int,
    warmup_steps: int,
    steps: int,
) -> list[str]:
    """A bounded eager CPU trial of `steps` measured steps at micro_batch x grad_accum, its data
    and checkpoints under `tmp`, no DataLoader worker (the benchmarks' common base)."""
    return [
        f"model={model}",
        f"batch.tokens_per_step={micro_batch * grad_accum * block_size}",
        f"batch.micro_batch={micro_batch}",
        f"batch.grad_accum={grad_accum}",
        "data.num_workers=0",
        f"data.dir={tmp / 'data' / 'synthetic'}",
        f"checkpoint.dir={tmp / 'ckpt'}",
        "runtime.device=cpu",
        "runtime.compile=none",
        f"trial.warmup_steps={warmup_steps}",
        f"trial.max_steps={steps}",
        f"trial.min_steps={steps}",
        "trial.max_seconds=600",
    ]


def add_cpu_trial_args(
    p: argparse.ArgumentParser,
    *,
    model: str,
    grad_accum: int,
    warmup_steps: int,
    steps: int,
    micro_batch_help: str | None = None,
) -> None:
    """The command-line arguments `cpu_trial_overrides_of` reads, with the script's defaults."""
    p.add_argument("--model", default=model)
    p.add_argument("--block-size", type=int, default=64, help="the preset's block_size")
    p.add_argument("--micro-batch", type=int, default=8, help=micro_batch_help)
    p.add_argument("--grad-accum", type=int, default=grad_accum)
    p.add_argument("--warmup-steps", type=int, default=warmup_steps, help="warm-up steps per trial")
    p.add_argument("--steps", type=int, default=steps, help="measured steps per trial")


def cpu_trial_overrides_of(
    args: argparse.Namespace, tmp: Path, *, micro_batch: int | None = None
) -> list[str]:
    """`cpu_trial_overrides` of the arguments `add_cpu_trial_args` added; `micro_batch` instead of
    --micro-batch where given."""
    return cpu_trial_overrides(
        tmp,
        model=args.model,
        micro_batch=args.micro_batch if micro_batch is None else micro_batch,
        grad_accum=args.grad_accum,
        block_size=args.block_size,
        warmup_steps=args.warmup_steps,
        steps=args.steps,
    )
