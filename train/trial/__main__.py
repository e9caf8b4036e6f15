"""`python -m train.trial <hydra overrides>`, composed by Hydra, or `python -m train.trial --pinned
FILE [key=value ...]`: a fully resolved file, what the sweeper's children run (pinned.py).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from train.core.config_file import exit_on_bad_config_file
from train.core.keys import check_trainer_keys, exit_on_mistyped_keys, flat_keys
from train.run.torchrun import under_torchrun
from train.trial.measurement import run_composed


@hydra.main(version_base="1.3", config_path="../../conf", config_name="train")
def main(dcfg: DictConfig) -> int:
    from hydra.core.hydra_config import HydraConfig

    try:  # a `+key=` Hydra added: the same one line as `python -m train`, before any step
        check_trainer_keys(flat_keys(OmegaConf.to_container(dcfg, resolve=False)))
    except ValueError as exc:
        logging.getLogger("train.trial").error("invalid config: %s", exc)
        raise SystemExit(2) from None
    code = run_composed(dcfg, base_dir=Path(HydraConfig.get().runtime.output_dir))
    if code and under_torchrun():
        end_failed_rank(code)
    if code:
        raise SystemExit(code)
    return code


def end_failed_rank(code: int) -> None:
    """A data-parallel rank whose trial failed ends with its exit code, now: its failure is written
    (result.json) and its logs are flushed, and the interpreter's teardown is skipped. That
    teardown runs the process group's C++ destructors, and gloo's, with a peer already gone, may
    abort (SIGABRT), so the launcher would read a signal instead of the code the rank chose."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pinned"]:
        from train.trial.pinned import main_pinned

        # the overrides after FILE get the same one line (a `+key=` too: --pinned adds no keys)
        exit_on_mistyped_keys([arg.removeprefix("+") for arg in sys.argv[3:]])
        pinned_code = main_pinned(sys.argv[2:])
        if pinned_code and under_torchrun():  # a rank of a data-parallel trial (launched.py)
            end_failed_rank(pinned_code)
        sys.exit(pinned_code)
    exit_on_mistyped_keys(sys.argv[1:])  # one line with the nearest schema key, before Hydra
    sys.argv[1:] = exit_on_bad_config_file(sys.argv[1:])  # a broken best.yaml: one line
    main()
