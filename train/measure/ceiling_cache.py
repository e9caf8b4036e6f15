"""Where measured matmul ceilings are kept, and how an entry is named: torch-free.

train.measure.ceiling measures and writes entries; `python -m train.explain` reads them without
importing torch. Both take the path, the key and the file layout from here, so a reader never
looks somewhere the writer does not write.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_VERSION = 1


def default_cache_path() -> Path:
    """$XDG_CACHE_HOME/throughput-sweep/ceiling.json (~/.cache when XDG_CACHE_HOME is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "throughput-sweep" / "ceiling.json"


def _device_part(*, name: str, dtype: str) -> list[str]:
    return [name, dtype, "op=linear"]


def cache_key(
    *, name: str, dtype: str, tf32: bool, torch_version: str, threads: int, size: int | None
) -> str:
    """One entry's key. TF32 changes fp32 matmul speed several-fold on Ampere and newer, and the
    thread count changes a CPU's speed about linearly, so both are part of it."""
    parts = [*_device_part(name=name, dtype=dtype), f"tf32={tf32}", f"torch={torch_version}"]
    parts += [f"threads={threads}", f"n={size or 'auto'}"]
    return "|".join(parts)


def load_entries(path: Path) -> dict[str, object]:
    """Cache entries, or {} when the file is missing, unreadable or not ours."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("ignoring unreadable matmul-ceiling cache %s: %s", path, err)
        return {}
    if (
        not isinstance(data, dict)
        or data.get("version") != CACHE_VERSION
        or not isinstance(data.get("entries"), dict)
    ):
        log.warning("ignoring matmul-ceiling cache %s: unexpected layout", path)
        return {}
    return data["entries"]


def save_entries(path: Path, entries: dict[str, object]) -> None:
    """Write atomically (temp file + os.replace) so a reader never sees half a file.

    Two processes measuring at once may each drop the other's new entry; that only costs a
    re-measurement later, so no file lock.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"version": CACHE_VERSION, "entries": entries}, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        log.warning("could not write matmul-ceiling cache %s: %s", path, err)


def newest_ceiling(
    device_name: str, dtype: str, *, tf32: bool, path: Path | None = None
) -> tuple[float, str] | None:
    """(FLOP/s, source) of the newest ceiling measured on a device of this name in `dtype` (with
    this TF32 setting, for fp32), whatever the torch version, threads and size; None if none."""
    entries = load_entries(path if path is not None else default_cache_path())
    prefix = "|".join(_device_part(name=device_name, dtype=dtype)) + "|"
    tf32_part = f"|tf32={tf32}|"
    hits = [
        v
        for k, v in entries.items()
        if k.startswith(prefix)
        and isinstance(v, dict)
        and isinstance(v.get("flops"), int | float)
        and (dtype != "fp32" or tf32_part in k)
    ]
    if not hits:
        return None
    best = max(hits, key=lambda v: v.get("measured_at", 0))
    return float(best["flops"]), f"cached measurement: {best.get('source')}"
