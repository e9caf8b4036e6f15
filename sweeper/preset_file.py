"""A search preset's own keys, checked before Hydra composes it.

`search=<name>` merges conf/search/<name>.yaml (or a file of that name in a `hydra.searchpath`
folder) into `hydra.sweeper`. Hydra refuses a key the sweeper lacks with a multi-line
ConfigKeyError that names neither the new name of a renamed setting nor a near one; this check
answers a preset's key as the command line's is answered (train/core/keys.py sweeper_key_error),
naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

from train.core.keys import sweeper_key_error

DICT_SETTINGS = ("space",)  # a setting whose value is a mapping of the user's own keys


def preset_path(args: Iterable[str], conf_dir: Path) -> Path | None:
    """The file `search=<name>` in `args` selects: the first `hydra.searchpath` folder (file://
    or a plain path) that holds search/<name>.yaml, else conf/search/<name>.yaml; None when no
    preset is named or no such file exists (Hydra then says so itself)."""
    args = list(args)
    names = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("search=")]
    if not names or not names[-1]:
        return None
    folders = [
        Path(unquote(urlparse(p).path)) if "://" in p else Path(p) for p in _searchpath(args)
    ]
    for folder in [*folders, conf_dir]:
        path = folder / "search" / f"{names[-1]}.yaml"
        if path.is_file():
            return path
    return None


def _searchpath(args: list[str]) -> list[str]:
    """The folders of a `hydra.searchpath=[a,b]` override (the last one wins, as in Hydra)."""
    values = [a.split("=", 1)[1] for a in args if a.startswith("hydra.searchpath=")]
    if not values:
        return []
    inner = values[-1].strip().removeprefix("[").removesuffix("]")
    return [p.strip().strip("'\"") for p in inner.split(",") if p.strip()]


def preset_keys(doc: Mapping) -> list[str]:
    """The dotted settings a preset sets: `n_trials`, `verify.top_k` (a group's keys one level
    down), `space` (a dict setting, its keys the user's own)."""
    keys = []
    for key, value in doc.items():
        if key == "defaults":
            continue
        if isinstance(value, Mapping) and key not in DICT_SETTINGS and value:
            keys += [f"{key}.{inner}" for inner in value]
        else:
            keys.append(str(key))
    return keys


def preset_key_error(
    path: Path, names: Iterable[str], renamed: Mapping[str, str] | None = None
) -> str | None:
    """The one line refusing the first key of the preset at `path` that the sweeper lacks."""
    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, Mapping):
        return None  # not a mapping: Hydra's own error names it
    names = list(names)
    for key in preset_keys(doc):
        error = sweeper_key_error(key, names, renamed)
        if error:
            return f"{error} (set in the search preset {path})"
    return None
