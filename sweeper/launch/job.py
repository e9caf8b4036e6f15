"""One Hydra job = one trial: pin the composed trainer config to a file and run it in a child
process.

This runs wherever Hydra's launcher puts the job (in the sweep process, a joblib worker, a Slurm
node).
It returns a plain dict (picklable for any launcher); the sweeper turns it into the study's verdict.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sweeper.launch.runner import run_child, trial_argv
from sweeper.masking import hydra_files, scrub_files
from sweeper.space.limits import DEFAULT_STALL_S, DEFAULT_TIMEOUT_S
from train.core.compile_cache import cache_env
from train.core.keys import COMPILE_CACHE
from train.core.paths import PROJECT_DIR

log = logging.getLogger(__name__)

TRIAL_CONFIG_NAME = "trial_config"
# The study a search trial reports to: passed on the child's command line, never written into
# trial_config.yaml, so `python -m train.trial --pinned trial_config.yaml` (a re-run of the
# pinned trial) never attaches to the sweep's study (train/trial/pinned.py drops them too)
STUDY_KEYS = ("study_storage", "study_name", "trial_id")


def pin_config(cfg: DictConfig) -> dict:
    """The composed trainer config, fully resolved, with paths made absolute, as a plain dict."""
    doc = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(doc, dict)
    for section, key in (("data", "dir"), ("checkpoint", "dir")):
        doc[section][key] = str(Path(doc[section][key]).expanduser().resolve())
    return doc


def study_overrides(doc: dict) -> list[str]:
    """Take the study settings out of `doc` (reset to their defaults, in place) and return them
    as the child's command-line overrides; none for a trial that reports to no study."""
    from sweeper.space.overrides import hydra_quote

    trial = doc.get("trial", {})
    taken = {k: trial.pop(k) for k in STUDY_KEYS if k in trial}
    if not taken.get("study_storage"):
        return []
    return [
        f"trial.{k}={v if isinstance(v, int) else hydra_quote(str(v))}" for k, v in taken.items()
    ]


def write_trial_config(doc: dict, job_dir: Path) -> Path:
    """A config file the child loads by name; `train_schema` types it exactly like
    conf/train.yaml."""
    path = job_dir / f"{TRIAL_CONFIG_NAME}.yaml"
    OmegaConf.save(OmegaConf.create({"defaults": ["train_schema", "_self_"], **doc}), path)
    return path


def trial_env(compile_cache: str = "") -> dict[str, str]:
    """The variables a trial gets on top of ours: the project importable from anywhere, and the
    compile cache it uses (runtime.compile_cache, set before torch is imported:
    train/core/compile_cache.py)."""
    path = os.environ.get("PYTHONPATH")
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_DIR), path) if p),
        **cache_env(compile_cache),
    }


def prestart_zygote(sweep_dir: Path, *, compile_cache: str = "") -> None:
    """Start the trial zygote (sweeper/launch/spawn.py) with exactly the environment that trials
    will get (their compile cache included: the zygote imports torch's config with it)."""
    from sweeper.launch import spawn
    from sweeper.launch.runner import child_environment

    spawn.prestart(
        python=sys.executable,
        env=child_environment(trial_env(compile_cache)),
        stderr_path=sweep_dir / "zygote.log",
    )


def job_limits(sweeper_cfg: Any) -> tuple[float, float | None]:
    """(hard, stall) limits of this job's trial. The sweeper writes each trial's limits into its
    job's overrides (sweeper/space/limits.py sizes them); a job launched without them gets the fixed
    defaults. Stall: > 0 seconds, < 0 no stall check, 0 the default."""
    timeout_s = float(OmegaConf.select(sweeper_cfg, "budget.trial_timeout_s") or 0)
    timeout_s = timeout_s or DEFAULT_TIMEOUT_S
    stall = float(OmegaConf.select(sweeper_cfg, "budget.stall_timeout_s") or 0)
    if stall < 0:
        return timeout_s, None
    return timeout_s, stall or DEFAULT_STALL_S


def run_job(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig

    from sweeper.launch.log_routing import quiet_console

    quiet_console()  # the job's "trial in <dir>" goes to its log file; the trial line says it
    hc = HydraConfig.get()
    job_dir = Path(hc.runtime.output_dir)
    scrub_files(hydra_files(job_dir))  # a storage URL's password in Hydra's copy of the command
    sweeper_cfg = hc.sweeper
    doc = pin_config(cfg)
    study = study_overrides(doc)
    config_file = write_trial_config(doc, job_dir)
    argv = trial_argv(
        python=sys.executable, config_file=config_file, job_dir=job_dir, overrides=study
    )
    env = trial_env(str(OmegaConf.select(cfg, COMPILE_CACHE, default="") or ""))
    timeout_s, stall_timeout_s = job_limits(sweeper_cfg)
    outcome = run_child(
        argv, job_dir=job_dir, timeout_s=timeout_s, stall_timeout_s=stall_timeout_s, env=env
    )
    log.info(
        "trial in %s: %s%s",
        job_dir,
        outcome.state,
        f" ({outcome.reason})" if outcome.reason else "",
    )
    return {
        "state": outcome.state,
        "reason": outcome.reason,
        "result": outcome.result,
        "returncode": outcome.returncode,
        "wall_s": outcome.wall_s,
        "job_dir": str(job_dir),
        "overrides": list(hc.overrides.task),
    }
