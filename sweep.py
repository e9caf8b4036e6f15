"""`python sweep.py -m search=throughput`: find, verify and export the fastest training
configuration.

Thin on purpose: Hydra composes conf/sweep.yaml, our sweeper (hydra/sweeper=throughput) drives
Optuna,
and each Hydra job is one trial, run in its own child process by `sweeper.launch.job.run_job`.
"""

import hydra
from omegaconf import DictConfig

import train.core.config  # noqa: F401  (registers the trainer schema, `train_schema`, with Hydra)


@hydra.main(version_base="1.3", config_path="conf", config_name="sweep")
def main(cfg: DictConfig) -> dict:
    from sweeper.launch.job import run_job

    return run_job(cfg)


def check_command_line() -> None:
    """A mistyped key is refused in one line with the nearest schema key, and a launcher plugin
    that is not installed in one line naming the extra, before Hydra starts."""
    import logging
    import sys
    from pathlib import Path

    from hydra_plugins.throughput_sweeper.config import RENAMED, setting_names
    from sweeper.plan.extras import missing_plugin_error
    from sweeper.preset_file import preset_key_error, preset_path
    from train.core.keys import exit_on_mistyped_keys

    missing = missing_plugin_error(sys.argv[1:])
    if missing:
        logging.basicConfig(format="[%(levelname)s] %(message)s")
        logging.getLogger("sweep").error("%s", missing)
        raise SystemExit(2)

    exit_on_mistyped_keys(sys.argv[1:], sweeper_fields=setting_names(), sweeper_renamed=RENAMED)
    preset = preset_path(sys.argv[1:], Path(__file__).resolve().parent / "conf")
    error = preset and preset_key_error(preset, setting_names(), RENAMED)
    if error:
        logging.basicConfig(format="[%(levelname)s] %(message)s")
        logging.getLogger("sweep").error("%s", error)
        raise SystemExit(2)


if __name__ == "__main__":
    check_command_line()
    main()
