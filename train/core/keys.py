"""Unknown config keys answered with the nearest known one ("did you mean ...").

Torch-free, so the sweep's preflight and the trainer refuse a mistyped key with the same words.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping

from train.core.hooks import enabled as hooks_enabled
from train.core.hooks import hook_key_error, hook_keys

# The trainer's dotted keys the sweeper reads and sets, one name each (train/core/config.py's
# schema has every one; tests/sweeper/test_point.py checks it).
TOKENS_PER_STEP = "batch.tokens_per_step"
MICRO_BATCH = "batch.micro_batch"
GRAD_ACCUM = "batch.grad_accum"
MODEL_NAME = "model.name"
N_LAYER = "model.n_layer"
N_HEAD = "model.n_head"
N_EMBD = "model.n_embd"
BLOCK_SIZE = "model.block_size"
VOCAB_SIZE = "model.vocab_size"
BIAS = "model.bias"
DEVICE = "runtime.device"
NPROC = "runtime.nproc"
THREADS = "runtime.threads"
SEED = "runtime.seed"
DTYPE = "runtime.dtype"
TF32 = "runtime.tf32"
ATTENTION = "runtime.attention"
LOSS = "runtime.loss"
COMPILE = "runtime.compile"
COMPILE_UNIT = "runtime.compile_unit"
COMPILE_CACHE = "runtime.compile_cache"
FLOAT8 = "runtime.float8"
FLOAT8_EMULATE = "runtime.float8_emulate"
RECOMPUTE = "runtime.activation_checkpointing"
WORKERS = "data.num_workers"
PIN_MEMORY = "data.pin_memory"
CHECKPOINT_EVERY = "checkpoint.every_steps"
CHECKPOINT_DIR = "checkpoint.dir"
CHECKPOINT_MODE = "checkpoint.mode"
TRIAL_WARMUP_STEPS = "trial.warmup_steps"
TRIAL_MIN_STEPS = "trial.min_steps"
TRIAL_MAX_STEPS = "trial.max_steps"
TRIAL_MAX_SECONDS = "trial.max_seconds"
TRIAL_TARGET_CI = "trial.target_ci"
TRIAL_CI_MIN_STEPS = "trial.ci_min_steps"
TRIAL_SEEDS = "trial.seeds"
TRIAL_SAVE_RECORD = "trial.save_record"
TRIAL_REPORT_EVERY = "trial.report_every"
TRIAL_PROFILE = "trial.profile"
TRIAL_PROFILE_STEPS = "trial.profile_steps"
PROJECT_ABOVE_S = "trial.project_above_s"
PROJECT_MICRO_STEPS = "trial.project_micro_steps"
STUDY_STORAGE = "trial.study_storage"
STUDY_NAME = "trial.study_name"
TRIAL_ID = "trial.trial_id"
TRIAL_OUT = "trial.out"
PROGRESS_FILE = "trial.progress_file"


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest known key, or '' when none is close."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_key_error(key: str, known: Iterable[str], *, prefix: str = "") -> str:
    """One line for a key the schema does not have: the key, the nearest known one, the fix."""
    known = list(known)
    return (
        f"unknown setting {prefix}{key}{did_you_mean(key, known)}: "
        f"check the spelling against the schema ({len(known)} known keys)"
    )


def check_keys(keys: Iterable[str], known: Iterable[str], *, prefix: str = "") -> None:
    """Refuse the first key not in `known` with ValueError naming it and the closest match (a
    test hook's key: that it is one, train/core/hooks.py)."""
    known = set(known)
    for key in keys:
        if key not in known:
            error = hook_key_error(f"{prefix}{key}")
            raise ValueError(error or unknown_key_error(key, sorted(known), prefix=prefix))


def flat_keys(d: dict, prefix: str = "") -> list[str]:
    """The dotted leaf keys of a nested dict (an empty dict is a leaf)."""
    out: list[str] = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.extend(flat_keys(v, f"{prefix}{k}."))
        else:
            out.append(f"{prefix}{k}")
    return out


def schema_keys() -> set[str]:
    """Every dotted key of the trainer's schema (train/core/config.py Config)."""
    from omegaconf import OmegaConf

    from train.core.config import Config

    return set(flat_keys(OmegaConf.to_container(OmegaConf.structured(Config), resolve=False)))


def accepted_keys() -> set[str]:
    """The keys this process takes: the schema's, and the test hooks' under their switch."""
    return schema_keys() | (hook_keys() if hooks_enabled() else set())


OPEN_GROUPS = ("provenance.",)  # free-form by design


def check_trainer_keys(keys: Iterable[str]) -> None:
    """Refuse a trainer key the schema does not have (a `+key=` addition included)."""
    check_keys([k for k in keys if not k.startswith(OPEN_GROUPS)], accepted_keys())


CONFIG_GROUPS = ("model", "data", "search")  # `model=tiny` picks a preset file, not a key


def override_key(arg: str) -> str | None:
    """The key a plain `key=value` command-line override sets; None for flags, config-group
    choices (`model=tiny`, `hydra/launcher=joblib`), `+key=` additions (the trainer and the sweep's
    preflight check those against the schema) and `~key` deletions."""
    if arg.startswith("-") or "=" not in arg:
        return None
    key = arg.split("=", 1)[0]
    if key.startswith(("+", "~")) or "/" in key or key in CONFIG_GROUPS:
        return None
    return key


def sweeper_key_error(
    name: str, names: Iterable[str], renamed: Mapping[str, str] | None = None
) -> str | None:
    """The one line refusing `hydra.sweeper.<name>`, or None when the sweeper has it: `names` are
    its dotted settings (`n_trials`, `verify.top_k`), a setting or a group's prefix passes, and so
    does a key inside a dict setting (`space.batch.micro_batch`). An old flat name of `renamed`
    is answered with its new name, never read as an alias."""
    renamed = renamed or {}
    if name in renamed:
        return f"hydra.sweeper.{name} is now hydra.sweeper.{renamed[name]}"
    names = list(names)
    if any(name == n or name.startswith(f"{n}.") or n.startswith(f"{name}.") for n in names):
        return None
    return unknown_key_error(f"hydra.sweeper.{name}", sorted(f"hydra.sweeper.{n}" for n in names))


def check_command_line(
    args: Iterable[str],
    *,
    sweeper_fields: Iterable[str] = (),
    sweeper_renamed: Mapping[str, str] | None = None,
) -> None:
    """Refuse a mistyped override before Hydra composes anything, with did-you-mean from the
    schema: trainer keys against train/core/config.py, `hydra.sweeper.<setting>` against the
    sweeper's dotted settings (`sweeper_fields`; empty = not a sweep), an old flat sweeper name
    (`sweeper_renamed`: old -> new) naming its new one. Hydra's own `hydra.*` keys are left to
    it."""
    trainer = accepted_keys()
    parents = {k.rsplit(".", i)[0] for k in trainer for i in range(1, k.count(".") + 1)}
    fields = list(sweeper_fields)
    for arg in args:
        key = override_key(arg)
        if key is None:
            continue
        if key.startswith("hydra."):
            parts = key.split(".", 2)
            if fields and parts[1] == "sweeper" and len(parts) > 2:
                error = sweeper_key_error(parts[2], fields, sweeper_renamed)
                if error:
                    raise ValueError(error)
            continue
        if key in trainer or key in parents or key.startswith(OPEN_GROUPS):
            continue
        raise ValueError(hook_key_error(key) or unknown_key_error(key, sorted(trainer)))


def exit_on_mistyped_keys(
    args: Iterable[str],
    *,
    sweeper_fields: Iterable[str] = (),
    sweeper_renamed: Mapping[str, str] | None = None,
) -> None:
    """An entry point's first step: a mistyped override ends the command with one error line and
    exit 2, before Hydra composes anything."""
    try:
        check_command_line(args, sweeper_fields=sweeper_fields, sweeper_renamed=sweeper_renamed)
    except ValueError as exc:
        logging.basicConfig(format="[%(levelname)s] %(message)s")
        logging.getLogger(__name__).error("%s", exc)
        raise SystemExit(2) from None
