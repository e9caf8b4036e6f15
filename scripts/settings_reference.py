"""Write docs/reference/settings.md: every trainer key and hydra.sweeper setting, from the code.

    python scripts/settings_reference.py            # rewrite docs/reference/settings.md
    python scripts/settings_reference.py --check    # exit 1 if the file is not what the code says

A setting's type is its annotation, its default the dataclass default, and its meaning the comment
that documents the field in the source: the comment at the end of its line, else the comment lines
right above it. The trainer's sections are the fields of `train.core.config.Config`, each a
dataclass of train/core/config.py; the sweeper's settings are the fields of `ThroughputSweeperConf`
(hydra_plugins/throughput_sweeper/config.py) and of its groups (`verify`, `guard`, ...), which
`sweeper/settings.py` checks; its old flat names are listed with their new ones. A field without a
comment gets an empty meaning, which tests/architecture/test_settings_reference.py refuses.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hydra_plugins.throughput_sweeper import config as sweeper_config  # noqa: E402
from train.core import config as train_config  # noqa: E402

OUT = REPO / "docs" / "reference" / "settings.md"
SWEEPER_PREFIX = "hydra.sweeper"


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One documented key: `model.n_layer`, `hydra.sweeper.n_trials`."""

    key: str
    type: str  # the annotation as written in the source
    default: str  # as a user writes it on the command line or in YAML
    meaning: str  # the field's doc comment, joined into one line ('' = undocumented)


def field_comments(path: Path, class_name: str) -> dict[str, tuple[str, str]]:
    """Each field of `class_name` in `path` -> (annotation text, its doc comment)."""
    source = path.read_text()
    comments: dict[int, str] = {}  # line -> comment text
    code_lines: set[int] = set()  # lines holding anything but a comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    cls = next(
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ClassDef) and n.name == class_name
    )
    out = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        line = node.lineno
        if node.end_lineno in comments:  # a comment at the end of the field's own line
            text = [comments[node.end_lineno]]
        else:  # the comment-only lines right above it
            text, above = [], line - 1
            while above in comments and above not in code_lines:
                text.insert(0, comments[above])
                above -= 1
        out[node.target.id] = (ast.unparse(node.annotation), " ".join(text))
    return out


def as_written(value: Any) -> str:
    """A default as a user writes it in an override or YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) and not value else "[]" if not value else repr(value)
    return repr(value)


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def settings_of(cls: type, prefix: str, path: Path) -> list[Setting]:
    docs = field_comments(path, cls.__name__)
    return [
        Setting(
            key=f"{prefix}.{f.name}",
            type=docs[f.name][0],
            default=as_written(default_of(f)),
            meaning=docs[f.name][1],
        )
        for f in dataclasses.fields(cls)
        if not f.name.startswith("_")  # _target_: Hydra's, not a setting
    ]


def trainer_sections() -> dict[str, type]:
    """`train.core.config.Config`'s sections: name -> dataclass (model -> ModelConfig, ...)."""
    return {
        f.name: f.default_factory
        for f in dataclasses.fields(train_config.Config)
        if dataclasses.is_dataclass(f.default_factory)
    }


def trainer_settings() -> dict[str, list[Setting]]:
    """Every trainer key, by section; '' holds the top-level keys that are no section."""
    path = Path(train_config.__file__)
    by_section = {name: settings_of(cls, name, path) for name, cls in trainer_sections().items()}
    top = field_comments(path, "Config")
    by_section[""] = [
        Setting(
            key=f.name,
            type=top[f.name][0],
            default=as_written(default_of(f)),
            meaning=top[f.name][1],
        )
        for f in dataclasses.fields(train_config.Config)
        if f.name not in by_section
    ]
    return by_section


def sweeper_sections() -> dict[str, list[Setting]]:
    """Every `hydra.sweeper.*` setting, by group; '' holds the top-level ones."""
    path = Path(sweeper_config.__file__)
    groups = sweeper_config.groups()
    by_group = {
        name: settings_of(cls, f"{SWEEPER_PREFIX}.{name}", path) for name, cls in groups.items()
    }
    top = settings_of(sweeper_config.ThroughputSweeperConf, SWEEPER_PREFIX, path)
    return {"": [t for t in top if t.key.rsplit(".", 1)[-1] not in groups], **by_group}


def sweeper_settings() -> list[Setting]:
    """Every `hydra.sweeper.*` setting."""
    return [s for group in sweeper_sections().values() for s in group]


def all_settings() -> list[Setting]:
    return [s for group in trainer_settings().values() for s in group] + sweeper_settings()


def _cell(text: str) -> str:
    """Text for a table cell: a pipe would end the cell, and `<name>` would read as an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def _table(rows: list[Setting]) -> list[str]:
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{s.key}` | `{s.type}` | `{s.default}` | {_cell(s.meaning)} |" for s in rows]
    return lines


HEADER = """\
# Settings reference

<!-- Generated by scripts/settings_reference.py from train/core/config.py and
hydra_plugins/throughput_sweeper/config.py: do not edit; run
`python scripts/settings_reference.py`. -->

Every key the trainer reads and every setting of the sweep, with its type, its default in the
schema and its meaning, taken from the dataclasses that declare them. YAML under `conf/` may set
other values: `conf/sweep.yaml` shortens the trials of a sweep, and each
`conf/search/<name>.yaml` sets `hydra.sweeper.*` values of its own. To see the values a command
will use:

```bash
python sweep.py --cfg hydra -p hydra.sweeper          # the sweeper's settings (add search=<name>)
python sweep.py --cfg job                              # the trainer's keys as a sweep composes them
```

A key that is not listed here is refused in one line with the nearest known key
([Troubleshooting](../troubleshooting.md)).
"""


def render() -> str:
    lines = [HEADER]
    sections = trainer_settings()
    lines.append("## Trainer keys\n")
    lines.append(
        "Set on the command line (`runtime.compile=default`), in YAML, or pinned in "
        "`best.yaml`; `train/core/config.py` checks every value before a step runs.\n"
    )
    for name, cls in trainer_sections().items():
        doc = (cls.__doc__ or "").strip()
        generated = doc.startswith(f"{cls.__name__}(")  # dataclasses' own signature, no docstring
        lines.append(f"### `{name}`\n")
        if doc and not generated:
            lines.append(" ".join(doc.split()) + "\n")
        lines += [*_table(sections[name]), ""]
    lines.append("### Top-level keys\n")
    lines += [*_table(sections[""]), ""]
    lines.append(f"## Sweeper settings (`{SWEEPER_PREFIX}.*`)\n")
    lines.append(
        "Set on the command line (`hydra.sweeper.n_trials=20`, `hydra.sweeper.verify.top_k=1`) "
        "or in a search space's YAML (a group as a mapping: `verify: {top_k: 1}`); "
        "`sweeper/settings.py` checks them before anything starts. The study's own settings "
        "are at the top, as in Hydra's Optuna sweeper; the rest come in groups.\n"
    )
    sweeper = sweeper_sections()
    lines += [*_table(sweeper[""]), ""]
    for name, cls in sweeper_config.groups().items():
        lines.append(f"### `{SWEEPER_PREFIX}.{name}`\n")
        lines.append(" ".join((cls.__doc__ or "").split()) + "\n")
        lines += [*_table(sweeper[name]), ""]
    lines.append("### Renamed settings\n")
    lines.append(
        "The sweeper's settings had flat names before they came in groups. An old name is "
        "refused before anything starts, naming its new one "
        "(`hydra.sweeper.verify_repeats is now hydra.sweeper.verify.repeats`), on the command "
        "line and in a search preset's file alike.\n"
    )
    lines += ["| old name | new name |", "| --- | --- |"]
    lines += [
        f"| `{SWEEPER_PREFIX}.{old}` | `{SWEEPER_PREFIX}.{new}` |"
        for old, new in sweeper_config.RENAMED.items()
    ]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from what the code says"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run python scripts/settings_reference.py")
            return 1
        print(f"{args.out} is up to date ({len(all_settings())} settings)")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(all_settings())} settings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
