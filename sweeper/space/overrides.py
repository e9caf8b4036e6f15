"""Values written as Hydra overrides (`key=value`) that read back exactly as written.

A trial's overrides travel on its command line and are parsed by Hydra's own override parser
(train/trial/pinned.py), whose value then goes into OmegaConf. Either step can turn text into
something else: `true`, `3` and `null` parse as a bool, an int and None, `a,b` as a sweep, and
`${x}` is interpolated by OmegaConf. So a value is written bare only when it reads back unchanged
through both, and single-quoted otherwise.
"""

from __future__ import annotations

import functools
import re
from typing import Any


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _reads_back(text: str, value: str) -> bool:
    """Whether the override value `text` reads back as the string `value`, through Hydra's parser
    and then OmegaConf."""
    from omegaconf import OmegaConf

    try:
        parsed = _parser().parse_override(f"key={text}")
        if parsed.is_sweep_override() or not isinstance(parsed.value(), str):
            return False
        return OmegaConf.create({"v": parsed.value()}).v == value
    except Exception:  # not valid grammar as written, or an interpolation OmegaConf cannot resolve
        return False


def hydra_quote(value: str) -> str:
    """`value` as override text that reads back as exactly `value`: bare when it already does,
    single-quoted otherwise.

    Inside quotes Hydra un-escapes only backslashes that run into a quote (`_unescape_quoted_string`
    in hydra/core/override_parser/overrides_visitor.py), so those runs are doubled and the quote
    escaped, as is a run at the end (it would escape the closing quote); `${` is escaped for
    OmegaConf, which would otherwise interpolate it.
    """
    if _reads_back(value, value):
        return value
    text = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    text = "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text) + "'"
    if not _reads_back(text, value):
        raise ValueError(f"cannot write {value!r} as a Hydra override value")
    return text


def format_override(key: str, value: Any) -> str:
    """`key=value` in Hydra's grammar for a scalar `value`, strings quoted where needed."""
    if isinstance(value, bool) or value is None:
        text = {True: "true", False: "false", None: "null"}[value]
    elif isinstance(value, int | float):
        text = repr(value)
    elif isinstance(value, str):
        try:
            text = hydra_quote(value)
        except ValueError:
            raise ValueError(f"{key}: cannot write {value!r} as a Hydra override") from None
    else:
        raise ValueError(f"{key}: overrides take scalars, got {type(value).__name__} {value!r}")
    return f"{key}={text}"
