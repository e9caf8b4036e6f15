"""Sweep settings checked before anything starts: no zygote, no sweep dir content, no trial.

Each check raises ValueError with one line naming the setting, the bad value (secrets masked) and
the fix; the sweeper's entry shows that line without a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sweeper.launch import kinds
from sweeper.masking import mask_secrets
from sweeper.plan.plan_device import known_plan_devices
from sweeper.study.optuna_study import PRUNERS, SAMPLERS
from train.core import keys
from train.core.keys import BLOCK_SIZE, GRAD_ACCUM, MICRO_BATCH, NPROC, TOKENS_PER_STEP


def check_sweep(settings: Any, sweep_dir: Path, *, launcher: str = "BasicLauncher") -> None:
    """The sweep-level settings, before the study, the zygote or the sweep dir exist."""
    check_names(sampler=settings.sampler, pruner=settings.pruner.kind)
    check_launcher(launcher, n_jobs=settings.n_jobs, plan_device=settings.plan.device)
    check_sweep_dir(sweep_dir)
    check_storage(settings.storage)


def check_launcher(launcher: str, *, n_jobs: int, plan_device: str) -> None:
    """Parallel trials need a launcher that runs jobs in processes of their own, and a launcher
    that runs them on other machines (Slurm) needs the device named: probing here would plan
    for this login node's hardware, not the GPUs the trials get."""
    if n_jobs > 1 and not kinds.parallel(launcher):
        raise ValueError(
            f"hydra.sweeper.n_jobs={n_jobs} needs a parallel launcher: Hydra's basic launcher "
            f"runs one trial at a time; add hydra/launcher=joblib (this machine) or "
            f"hydra/launcher=submitit_slurm (a cluster), or set hydra.sweeper.n_jobs=1"
        )
    if not kinds.local(launcher) and not plan_device:
        raise ValueError(
            f"hydra/launcher={launcher} runs trials on other machines, so this one cannot probe "
            f"their device: set hydra.sweeper.plan.device to the GPU they get (one of "
            f"{known_plan_devices()})"
        )


def check_names(*, sampler: str, pruner: str) -> None:
    """The sampler and pruner are ones the study can build."""
    for name, value, allowed in (("sampler", sampler, SAMPLERS), ("pruner.kind", pruner, PRUNERS)):
        if value not in allowed:
            raise ValueError(
                f"hydra.sweeper.{name}={value!r} is not known: use one of {', '.join(allowed)}"
            )


def check_storage(url: str) -> None:
    """The Optuna storage URL parses and its database opens (a SQLite file can be created)."""
    import sqlalchemy
    from sqlalchemy.engine import make_url

    if not url:  # the default: sweeps/optuna.db beside the sweep, made by sweeper/start.py
        return
    shown = mask_secrets(url)
    fix = "give an Optuna storage URL such as sqlite:////abs/path/optuna.db or postgresql://..."
    try:
        parsed = make_url(url)
    except Exception as e:  # sqlalchemy.exc.ArgumentError for text that is no URL
        raise ValueError(
            f"hydra.sweeper.storage={shown} is not a database URL ({e}): {fix}"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        parent = Path(parsed.database).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ValueError(
                f"hydra.sweeper.storage={shown}: the folder {parent} does not exist or is not "
                f"writable: point the database at a writable folder"
            )
        check_sqlite_file(Path(parsed.database), shown=shown)
    try:
        engine = sqlalchemy.create_engine(url)
        with engine.connect() as conn:
            if parsed.get_backend_name() == "sqlite":  # SQLite reads the file at the first query
                conn.exec_driver_sql("SELECT count(*) FROM sqlite_master")
        engine.dispose()
    except Exception as e:
        reason = mask_secrets(str(e).splitlines()[0])
        if "DatabaseError" in reason:  # the file is there, and SQLite cannot read it
            fix = "it is damaged: restore it from a copy, or point the storage at a new file"
        raise ValueError(
            f"hydra.sweeper.storage={shown} cannot be opened ({reason}): {fix}"
        ) from None


# The first 16 bytes of every SQLite 3 database (https://www.sqlite.org/fileformat.html, 1.3.1)
SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_file(path: Path, *, shown: str) -> None:
    """An existing SQLite storage file is a database: SQLite opens any file lazily and fails only
    at the first query, after the zygote and the sweep dir exist. An empty file is a new one."""
    if path.is_dir():
        raise ValueError(
            f"hydra.sweeper.storage={shown}: {path} is a folder, not a database file: name a "
            f"file in it, e.g. sqlite:///{path / 'optuna.db'}"
        )
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb") as f:
        head = f.read(len(SQLITE_HEADER))
    if head != SQLITE_HEADER:
        raise ValueError(
            f"hydra.sweeper.storage={shown}: {path} is not a SQLite database (it starts with "
            f"{head[:8]!r}): point the storage at an Optuna database, or at a new file to start one"
        )


def check_sweep_dir(sweep_dir: Path) -> None:
    """The sweep dir is, or can be made, a writable folder (nothing is created here)."""
    probe = sweep_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK) or str(probe).startswith("/proc"):
        raise ValueError(
            f"hydra.sweep.dir={sweep_dir} is not writable ({probe} is not a writable folder): "
            f"set hydra.sweep.dir to a folder you can write"
        )


def check_trainer_keys(base: dict[str, Any], space_keys: list[str]) -> None:
    """Every trainer key of the request (its fixed overrides, `+key=` ones too, and the space's)
    is one the schema has."""
    keys.check_trainer_keys([k for k in [*base, *space_keys] if "." in k])


def listed_ints(spec: Any) -> list[int] | None:
    """The integers of an explicit choice (`3,5`, `choice(3,5)`, a YAML list); None for ranges,
    intervals and anything else (the space's own scan judges those)."""
    if isinstance(spec, list | tuple):
        items = list(spec)
    elif isinstance(spec, str) and not spec.strip().startswith(("range", "interval")):
        body = spec.strip()
        if body.startswith("choice(") and body.endswith(")"):
            body = body[len("choice(") : -1]
        items = [x.strip() for x in body.split(",")]
    else:
        return None
    try:
        return [int(x) for x in items]
    except (TypeError, ValueError):
        return None


def check_micro_batches(space: dict[str, Any], base: dict[str, Any]) -> None:
    """A searched micro-batch list with no value that keeps the tokens per step is refused with
    the valid micro_batch x grad_accum splits."""
    from train.core.rules import grad_accum_for, valid_splits

    values = listed_ints(space.get(MICRO_BATCH))
    if not values or GRAD_ACCUM in space:
        return
    tps, block = base[TOKENS_PER_STEP], base[BLOCK_SIZE]
    world = int(base.get(NPROC) or 1)
    if any(grad_accum_for(mb, tokens_per_step=tps, block_size=block, world=world) for mb in values):
        return
    splits = valid_splits(tokens_per_step=tps, block_size=block, world=world)
    listed = ", ".join(f"{mb}x{ga}" for mb, ga in splits) or "none"
    procs = f" x runtime.nproc={world}" if world > 1 else ""
    raise ValueError(
        f"batch.micro_batch={','.join(map(str, values))}: no value keeps batch.tokens_per_step="
        f"{tps} at model.block_size={block}{procs}; valid micro_batch x grad_accum splits: "
        f"{listed} (search micro-batches from {', '.join(str(mb) for mb, _ in splits)})"
    )
