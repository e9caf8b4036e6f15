"""A config file the user hands over, read before Hydra: `python -m train --config-path DIR
--config-name best`, `python -m train.trial --pinned FILE`, the best.yaml `explain` reads.

Hydra parses the primary config itself, and a file that is not UTF-8 or not YAML ends there in a
traceback. So the entry points read the file first, with the parser Hydra uses (OmegaConf's), and
answer in one line naming the file, what is wrong and the fix. A sweep's best.yaml lists the
sections it pinned (`pinned_sections`, near its top; sweeper/report/best_yaml.py): a file that
lacks any was cut short or edited, and training it would fill the gap with the schema's defaults,
a config the sweep never measured, so it is refused.

Part of the torch-free core (train/core/).
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import logging
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from train.core.config import Config, trainer_schema
from train.core.hooks import hook_key_error
from train.core.keys import did_you_mean, schema_keys

log = logging.getLogger(__name__)

PINNED_KEY = "pinned_sections"  # a top-level key of the schema (train/core/config.py Config)
# the schema's sections: every top-level key of a best.yaml (accepted_sections adds the test
# hooks' under their switch)
SECTIONS = tuple(f.name for f in dataclasses.fields(Config))
DEFAULTS = [
    "train_schema",
    "_self_",
]  # the defaults list of a best.yaml (sweeper/report/best_yaml.py)
RESTORE = (
    "restore it (a sweep's best.yaml is also an artifact of its MLflow run) or run the sweep again"
)
# Hydra's flags that name the primary config (hydra/_internal/utils.py get_args_parser)
PATH_FLAGS = ("--config-path", "-cp")
NAME_FLAGS = ("--config-name", "-cn")
DEFAULT_NAME = "train"  # @hydra.main(config_name="train") of train/__main__.py, train/trial


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's top-level mapping, parsed as Hydra parses it. ValueError in one line for a file
    that cannot be read, is not UTF-8, is not YAML, is empty, or holds no mapping."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    what = f"config file {path}"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(
            f"{what} cannot be read ({exc.strerror}): give a readable YAML file"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}): it is "
            f"damaged or not a config; {RESTORE}"
        ) from None
    try:
        doc = OmegaConf.load(io.StringIO(text))
    except YAMLError as exc:
        raise ValueError(
            f"{what} is not valid YAML ({_yaml_problem(exc)}): fix that line or {RESTORE}"
        ) from None
    except OmegaConfBaseException as exc:  # e.g. a `${` that is no interpolation
        raise ValueError(
            f"{what} cannot be parsed ({str(exc).splitlines()[0]}): fix the file or {RESTORE}"
        ) from None
    if not isinstance(doc, DictConfig):
        raise ValueError(
            f"{what} holds a list, not a mapping of config sections (model:, "
            f"batch:, ...): {RESTORE}"
        )
    if not doc:
        raise ValueError(f"{what} is empty: {RESTORE}")
    if not set(doc) - {"defaults", PINNED_KEY}:  # e.g. a best.yaml cut before its sections
        raise ValueError(
            f"{what} sets no config section (it holds only {', '.join(doc)}): it "
            f"was cut short or emptied; {RESTORE}"
        )
    check_trusted_keys(doc, what=what)
    return OmegaConf.to_container(doc, resolve=False)


def accepted_sections() -> tuple[str, ...]:
    """The top-level keys of the schema this process takes (train/core/config.py
    trainer_schema)."""
    return tuple(f.name for f in dataclasses.fields(trainer_schema()))


def check_trusted_keys(doc: Any, *, what: str) -> None:
    """A config file someone hands over is data: only the trainer's sections and the exact
    defaults list a best.yaml carries. A `hydra:` section (its job_logging can write files of the
    sender's choosing, its callbacks run code), another top-level key, or a defaults list that
    selects other config groups is refused in one line (ValueError)."""
    sections = accepted_sections()
    unknown = [str(k) for k in doc if k not in (*sections, "defaults")]
    hook = next((e for e in map(hook_key_error, unknown) if e), None)
    if hook:  # a test's hooks section, handed over without the test switch
        raise ValueError(f"{what}: {hook}")
    if unknown:
        near = [difflib.get_close_matches(k, sections, n=1) for k in unknown]
        hint = "; ".join(
            f"did you mean {m[0]!r} for {k!r}?" for k, m in zip(unknown, near, strict=True) if m
        )
        raise ValueError(
            f"{what}: top-level key(s) {', '.join(unknown)} are not trainer sections "
            f"({', '.join(sections)}){'; ' + hint if hint else ''}: remove them. Settings of "
            f"Hydra itself (hydra:) are never taken from a config file: pass them on the command "
            f"line (e.g. hydra.run.dir=...)"
        )
    if "defaults" in doc and list(doc["defaults"] or []) != DEFAULTS:
        got = list(doc["defaults"] or [])
        raise ValueError(
            f"{what}: defaults must be {DEFAULTS} (a best.yaml's), got {got}: a defaults list "
            f"from a file could pull in other config groups; remove or restore it"
        )


def check_schema(doc: Any, *, what: str) -> None:
    """Every value in the file fits the trainer's schema as Hydra will merge it: a key the schema
    lacks (a typo, or a setting renamed since the file was written) or a value of the wrong type
    is refused in one line naming the file, the key, what the schema expects and the nearest key,
    before Hydra answers with a many-line merge error."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    body = {k: v for k, v in doc.items() if k != "defaults"}
    try:
        OmegaConf.merge(OmegaConf.structured(trainer_schema()), body)
    except ConfigKeyError as exc:
        key = str(exc.full_key)
        if hook_key_error(key):  # a test hook (an older export holds their former keys)
            raise ValueError(f"{what}: {hook_key_error(key)}") from None
        section = key.rsplit(".", 1)[0] if "." in key else ""
        known = [k for k in schema_keys() if k.rsplit(".", 1)[0] == section] or schema_keys()
        raise ValueError(
            f"{what}: {key} is not a setting of the trainer{did_you_mean(key, known)}; it may "
            "come from an older version of the schema: rename or remove it"
        ) from None
    except OmegaConfBaseException as exc:  # a value of the wrong type, a missing enum member
        key = str(getattr(exc, "full_key", "") or "?")
        value = getattr(exc, "value", None)
        expected = _expected_type(key)
        raise ValueError(
            f"{what}: {key} = {value!r} is not {expected} "
            f"({str(exc).splitlines()[0]}): correct the value or {RESTORE}"
        ) from None


def _expected_type(key: str) -> str:
    """The schema's type of dotted `key`, in words (e.g. 'an int', 'one of fp32, bf16')."""
    cls: Any = trainer_schema()
    hint: Any = None
    for part in key.split("."):
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
        if part not in hints:
            return "what the schema expects"
        hint = cls = hints[part]
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(hint))
    words = {int: "an int", float: "a number", bool: "true or false", str: "a string"}
    return words.get(hint, f"a {getattr(hint, '__name__', hint)}")


def _yaml_problem(exc: Exception) -> str:
    """Where and what, in one line, from PyYAML's many-line error."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def missing_sections(doc: dict[str, Any]) -> list[str]:
    """The sections `doc`'s pinned_sections lists that it lacks (absent or empty); [] when it
    pins none (a config that is not an exported best.yaml)."""
    pinned = doc.get(PINNED_KEY) or []
    return [s for s in pinned if doc.get(s) in (None, {}, "")]


def read_pinned_config(path: Path, *, schema: bool = True) -> dict[str, Any]:
    """`read_config_file`, every section the file says it pinned is there, and every value fits
    the schema unless `schema` is off (ValueError)."""
    doc = read_config_file(path)
    missing = missing_sections(doc)
    if missing:
        why = "" if missing == ["provenance"] else ", and the schema's defaults would train instead"
        raise ValueError(
            f"config file {path} lacks pinned section(s) {', '.join(missing)} (its "
            f"{PINNED_KEY} lists them): it was cut short or edited{why}; {RESTORE}"
        )
    if schema:
        check_schema(doc, what=f"config file {path}")
    return doc


def _flag_value(args: Sequence[str], flags: tuple[str, ...]) -> tuple[int, str] | None:
    """(index of the value's token, value) of the last `--flag X` / `--flag=X` in args (argparse:
    the last one wins); None when absent."""
    found = None
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                found = (i + 1, args[i + 1])
            elif arg.startswith(f"{flag}="):
                found = (i, arg.split("=", 1)[1])
    return found


def primary_config_file(args: list[str]) -> tuple[list[str], Path | None]:
    """The command line with a relative --config-path made absolute, and the primary config file
    it names (None without --config-path: the project's own conf/).

    A relative --config-path is taken from the current folder, where the user typed it; Hydra
    would take it relative to the script's own folder (train/), where no config lives."""
    args = list(args)
    given = _flag_value(args, PATH_FLAGS)
    if given is None:
        return args, None
    index, value = given
    if value.startswith("pkg://"):
        return args, None
    folder = Path(value).expanduser().absolute()
    flag = args[index].split("=", 1)[0] + "=" if args[index] != value else ""
    args[index] = f"{flag}{folder}"
    named = _flag_value(args, NAME_FLAGS)
    name = named[1] if named else DEFAULT_NAME
    file = folder / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if not folder.is_dir():
        raise ValueError(
            f"--config-path {folder} is not a folder: give the folder that holds "
            f"{file.name} (a sweep's dir, multirun/<date>/<time>)"
        )
    if not file.exists():
        held = sorted(p.name for p in folder.glob("*.yaml"))
        raise ValueError(
            f"--config-name {name}: there is no {file} (the folder holds: "
            f"{', '.join(held) or 'no .yaml file'})"
        )
    return args, file


def checked_command_line(args: list[str]) -> list[str]:
    """The command line to hand Hydra (see primary_config_file), once the primary config file it
    names reads as a config with every section it pinned (ValueError otherwise)."""
    args, file = primary_config_file(args)
    if file is not None:
        read_pinned_config(file)
    return args


def exit_on_bad_config_file(args: list[str]) -> list[str]:
    """An entry point's step before Hydra: the checked command line, or one line and exit 2."""
    try:
        return checked_command_line(args)
    except ValueError as exc:
        logging.basicConfig(format="[%(levelname)s] %(message)s")
        log.error("%s", exc)
        raise SystemExit(2) from None
