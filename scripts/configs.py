"""Compose a trainer config the way `python -m train.trial` does, for the benchmark scripts
(imported as a sibling: scripts/ is on sys.path when a script runs as `python scripts/<name>.py`,
and each script puts the repository root there before importing this)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from train.config import Config

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def compose_config(overrides: list[str]) -> Config:
    """conf/train.yaml + overrides -> a validated Config, as `python -m train.trial` builds it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        dcfg = compose("train", overrides=overrides)
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, Config)
    return cfg
