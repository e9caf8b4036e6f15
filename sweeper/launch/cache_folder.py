"""The sweep's one compile cache: where it lives, and what every trial process is started with.

`hydra.sweeper.compile_cache` (hydra_plugins/throughput_sweeper/config.py) is resolved once, before
the zygote starts (sweeper/plan/prepare.py): `auto` is a `compile_cache` folder beside a SQLite
storage's file (sweeps/compile_cache by default, so a resumed or repeated sweep on the same study
file finds its graphs), else in the sweep dir; a folder is used as given; `off` gives every trial
a private, empty one with torch's caches disabled. Every search trial and race run then gets the
same folder twice: in its environment from its first instruction (`env`: torch reads the cache
switches when its config modules are imported, which a zygote-forked trial did before it was
forked) and as `runtime.compile_cache` (`overrides`, which the trainer applies before it compiles,
and best.yaml carries to the production run). `trial.compile_record` names the record of each
graph's first measured compile (train/core/compile_graphs.py) that time_to_train charges.

Light: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.space.overrides import hydra_quote
from train.core.compile_cache import OFF, cache_env
from train.core.compile_graphs import RECORD_NAME

AUTO = "auto"
FOLDER_NAME = "compile_cache"  # auto's folder name
OFF_RECORD_NAME = "compile_graphs.json"  # the record of a sweep without a shared cache (sweep dir)


@dataclass(frozen=True, kw_only=True)
class SweepCache:
    """The resolved compile cache of one sweep."""

    setting: str  # runtime.compile_cache of every trial: an absolute folder, or "off"
    record: str  # trial.compile_record: each graph's first measured compile (a JSON file)

    @property
    def folder(self) -> Path | None:
        return None if self.setting == OFF else Path(self.setting)

    def env(self) -> dict[str, str]:
        """What every trial process (and the zygote that forks them) starts with."""
        return cache_env(self.setting)

    def overrides(self) -> list[str]:
        """The trainer overrides every trial and race run gets."""
        return [
            f"runtime.compile_cache={hydra_quote(self.setting)}",
            f"trial.compile_record={hydra_quote(self.record)}",
        ]


def sqlite_file(storage: str) -> Path | None:
    """The database file of a SQLite storage URL (relative paths against the current dir); None
    for another database or an in-memory one."""
    prefix = "sqlite:///"
    if not storage.startswith(prefix):
        return None
    path = storage[len(prefix) :].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path).expanduser().resolve()


def sweep_cache(setting: str, *, storage: str, sweep_dir: Path) -> SweepCache:
    """`hydra.sweeper.compile_cache` resolved against the sweep's storage URL and folder."""
    if setting == OFF:
        return SweepCache(setting=OFF, record=str(Path(sweep_dir).resolve() / OFF_RECORD_NAME))
    if setting == AUTO:
        # "" is the default storage, sweeps/optuna.db in the current dir (sweeper/start.py)
        db = sqlite_file(storage) if storage else Path.cwd().resolve() / "sweeps" / "optuna.db"
        folder = (db.parent if db is not None else Path(sweep_dir).resolve()) / FOLDER_NAME
    else:
        folder = Path(setting).expanduser().resolve()
    return SweepCache(setting=str(folder), record=str(folder / RECORD_NAME))
