"""`python -m train.trial <hydra overrides>`, composed by Hydra, or `python -m train.trial --pinned
FILE [key=value ...]`: a fully resolved file, what the sweeper's children run (pinned.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from train.config_file import exit_on_bad_config_file
from train.trial.measurement import run_composed


@hydra.main(version_base="1.3", config_path="../../conf", config_name="train")
def main(dcfg: DictConfig) -> int:
    from hydra.core.hydra_config import HydraConfig

    code = run_composed(dcfg, base_dir=Path(HydraConfig.get().runtime.output_dir))
    if code:
        raise SystemExit(code)
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pinned"]:
        from train.trial.pinned import main_pinned

        sys.exit(main_pinned(sys.argv[2:]))
    sys.argv[1:] = exit_on_bad_config_file(sys.argv[1:])  # a broken best.yaml: one line
    main()
