"""Run one trial from a pinned config file: `python -m train.trial --pinned FILE [key=value ...]`.

What the sweeper's children run. FILE is a fully resolved trainer config (sweeper/launch/job.py
writes one per trial, `trial_config.yaml`), so there is nothing left to compose: Hydra's @hydra.main
would compose it twice (once to learn the run mode, once to run) and set up a run dir, ~0.7 s a
trial on a 2-core CPU, a tenth of a short trial. Validation is the same: the file is merged into the
`Config` schema (types) and built into the dataclasses (`__post_init__` checks). Overrides use
Hydra's override grammar (parsed by Hydra's own parser, so a value quoted for a Hydra command line
reads back the same); only plain assignments are accepted. The study a trial reports to
(trial.study_storage, study_name, trial_id) comes from the command line only: a file's own are
dropped, so re-running a sweep's trial_config.yaml never attaches to the sweep's study (no
"step already reported", no pruning of the re-run). Relative paths (`trial.out`) are taken
relative to FILE's directory. Log lines go to stderr in Hydra's job-log format.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from train.core.config import trainer_schema
from train.core.config_file import check_schema, read_pinned_config

log = logging.getLogger(__name__)

# the study settings a pinned file never carries into its run (see the module's docstring)
STUDY_KEYS = ("study_storage", "study_name", "trial_id")

LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's job_logging default


def apply_overrides(doc: DictConfig, overrides: list[str]) -> None:
    """`key=value` assignments (Hydra grammar) onto `doc`, in place."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for item in OverridesParser.create().parse_overrides(overrides):
        if item.is_sweep_override() or item.is_delete() or item.is_add():
            raise ValueError(
                f"--pinned takes plain key=value overrides, got {item.input_line!r}; "
                "a sweep or an add/delete belongs to the Hydra command line"
            )
        OmegaConf.update(doc, item.key_or_group, item.value(), merge=True)


def load_raw(path: Path, overrides: list[str]) -> DictConfig:
    """The file with the overrides applied, untyped (so a typed merge that fails still knows
    where the trial's result goes)."""
    # a broken file: one line naming it; a value the schema refuses still gets a result
    raw = OmegaConf.create(read_pinned_config(path, schema=False))
    raw.pop("defaults", None)  # Hydra's defaults list: the schema is merged in instead
    dropped = [k for k in STUDY_KEYS if OmegaConf.select(raw, f"trial.{k}") not in (None, "", -1)]
    for key in dropped:
        raw.trial.pop(key)
    if dropped:
        log.info(
            "%s: its study settings (trial.%s) are not used: a re-run reports to no study",
            path.name,
            ", trial.".join(dropped),
        )
    apply_overrides(raw, overrides)
    return raw


def main_pinned(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    if not argv:
        log.error("usage: python -m train.trial --pinned FILE [key=value ...]")
        return 2
    from train.trial.measurement import invalid_config, resolve_out, run_composed, writable_out

    path = Path(argv[0]).expanduser().resolve()
    try:
        raw = load_raw(path, argv[1:])
    except Exception as exc:  # no file, bad YAML, a bad override: nowhere to put a result
        log.error("%s", exc if str(path) in str(exc) else f"cannot run {path}: {exc}")
        return 2
    out = resolve_out(str(OmegaConf.select(raw, "trial.out", default="trial.json")), path.parent)
    if not writable_out(out):
        return 2
    try:
        dcfg = OmegaConf.merge(OmegaConf.structured(trainer_schema()), raw)
    except (ValueError, OmegaConfBaseException) as exc:  # a type or key the schema refuses
        try:
            check_schema(raw, what=f"config file {path}")  # the key, its type, the nearest key
            why = f"{path}: {exc}"
        except ValueError as named:
            why = str(named)
        return invalid_config(why, out=out, resolved=OmegaConf.to_container(raw))
    return run_composed(dcfg, base_dir=path.parent)
