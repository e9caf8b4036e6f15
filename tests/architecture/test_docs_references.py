"""What README.md and the docs site name still exists (issue 35: the docs are checked as the
README is).

The pages tests/architecture/test_readme_drift.py walks (the README and docs/**/*.md), read without
running anything: every repository path written as code (`sweeper/verify/race_rules.py`) exists;
every relative link leads to a file; every `hydra.sweeper.<name>` is a sweeper setting and every
trainer key set with `=` or written alone as code is a key of the schema; every command a page shows
(`python sweep.py ...`, `python -m train ...`, `python scripts/<name>.py`) parses as the tool would
parse it, with known keys, config choices that exist and scripts and modules that exist; and a
settings table's defaults are the schema's. The few deliberate typos of the troubleshooting page are
named below.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from tests.architecture.test_readme_drift import DOCS
from tests.sweep_helpers import REPO
from train.core import keys

sys.path.insert(0, str(REPO / "scripts"))
import settings_reference

PAGES = {str(p.relative_to(REPO)): p for p in DOCS}
# mistyped on purpose: the troubleshooting page shows what the tool answers to them
KNOWN_TYPOS = {"batch.micro_bach", "runtime.compiel", "hydra.sweeper.n_trails"}
SWEEPER_FIELDS = {
    s.key.removeprefix("hydra.sweeper.") for s in settings_reference.sweeper_settings()
}
# the old flat names: a past run's pasted output may quote them; a command a page shows may not
RENAMED = settings_reference.sweeper_config.RENAMED
TRAINER_KEYS = keys.schema_keys()
SECTIONS = tuple(settings_reference.trainer_sections())
# Hydra's launcher plugins the scale extra installs, beside our own conf/hydra/launcher/*.yaml
PLUGIN_LAUNCHERS = {"basic", "joblib", "submitit_local", "submitit_slurm"}

# --- reading a page ---------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,4}```(\w*)\s*$")


def split_page(text: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """(the prose with fenced blocks removed, [(language, lines) of each fenced block])."""
    prose, blocks, current = [], [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if current is None and m:
            current = (m.group(1), [])
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def code_spans(prose: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", prose)


# --- repository paths and links ---------------------------------------------------------------

PATH_SPAN = re.compile(r"(sweeper|train|scripts|tests|conf|hydra_plugins|docs|\.ci)/[\w./-]*")


def missing_paths(prose: str) -> list[str]:
    """Code spans that are a repository path (`sweeper/verify/race_rules.py`) naming nothing."""
    return [s for s in code_spans(prose) if PATH_SPAN.fullmatch(s) and not (REPO / s).exists()]


def broken_links(prose: str, *, folder: Path) -> list[str]:
    """Relative link targets (`[x](docs/sweep.md#plan)`) whose file does not exist."""
    targets = re.findall(r"\]\(([^)\s]+)\)", prose)
    local = [t for t in targets if not re.match(r"[a-z]+:|#", t)]
    return [t for t in local if not (folder / t.split("#")[0]).exists()]


# --- keys -------------------------------------------------------------------------------------

_SWEEPER_KEY = re.compile(r"hydra\.sweeper\.([a-z_0-9]+(?:\.[a-z_0-9]+)*)")
_SECTION = "|".join(SECTIONS)
_SET_KEY = re.compile(rf"(?<![\w./-])((?:{_SECTION})\.[a-z_0-9]+)=")  # runtime.dtype=bf16
_KEY_SPAN = re.compile(rf"(?:{_SECTION})\.[a-z_0-9]+")  # `runtime.dtype`


def unknown_keys(text: str, prose: str) -> list[str]:
    """Settings the page names that the schema does not have. Keys set with `=` anywhere (prose,
    commands, pasted output); keys written alone as code in the prose, unless they name a module
    of the trainer (`train.trial`, `train.explain`) or a file (`train.py`)."""
    sweeper = {
        f"hydra.sweeper.{k}"
        for k in _SWEEPER_KEY.findall(text)
        if k not in RENAMED and keys.sweeper_key_error(k, SWEEPER_FIELDS)
    }
    trainer = {k for k in _SET_KEY.findall(text) if k not in TRAINER_KEYS}
    for span in code_spans(prose):
        if _KEY_SPAN.fullmatch(span) and span not in TRAINER_KEYS and not _is_module(span):
            trainer.add(span)
    return sorted((sweeper | trainer) - KNOWN_TYPOS)


FILE_SUFFIXES = {"py", "log", "json", "yaml", "sh", "bin", "txt", "db", "pt", "png", "md"}


def _is_module(dotted: str) -> bool:
    """A trainer module (`train.trial`) or a file name (`trial.log`), not a key."""
    path = REPO / dotted.replace(".", "/")
    suffix = dotted.rsplit(".", 1)[-1]
    return path.is_dir() or path.with_suffix(".py").exists() or suffix in FILE_SUFFIXES


# --- commands ---------------------------------------------------------------------------------

_RUNS = re.compile(r"^(python3?|torchrun)\b")
_FLAGS_WITH_VALUE = {
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--cfg",
    "-c",
    "-p",
    "--package",
    "--pinned",
    "--result",
    "--run",
}
_PLACEHOLDER = re.compile(r"\.\.\.|[<>$]")  # ..., <sweep dir>, $OUT: filled in by the reader


def commands(prose: str, blocks: list[tuple[str, list[str]]]) -> list[str]:
    """The command lines a page shows: in shell and plain blocks, the `$ ` lines of pasted output,
    code spans; each starting with python (after `$ `) or chained after a shell command."""
    found = []
    for lang, lines in blocks:
        if lang in ("bash", "sh", "shell", "", "text"):
            found += [c.removeprefix("$ ") for c in _joined(lines)]
    found += code_spans(prose)
    return [c for c in found if _RUNS.match(c) or re.search(r"&& python3? ", c)]


def _joined(lines: list[str]) -> list[str]:
    out, current = [], ""
    for line in lines:
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        out.append(current)
        current = ""
    return out


def command_problems(command: str) -> list[str]:
    """Why a shown command would not run as written: [] when it parses with known keys."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError as exc:
        return [f"{command!r}: {exc}"]
    problems = []
    for segment in _segments(words):
        problems += _segment_problems(segment)
    return [f"{command!r}: {p}" for p in problems]


def _segments(words: list[str]) -> list[list[str]]:
    """Each `python ...` command of a line (`a && b; c`), without env assignments before it."""
    out, current = [], []
    for w in [*words, "&&"]:
        if w in ("&&", "||", ";", "|") or w.endswith(";"):
            if w.endswith(";") and w != ";":
                current.append(w[:-1])
            while current and re.fullmatch(r"\w+=.*", current[0]):
                current.pop(0)
            if current and current[0] in ("python", "python3"):
                out.append(current)
            current = []
        else:
            current.append(w)
    return out


def _segment_problems(argv: list[str]) -> list[str]:
    if len(argv) < 2:
        return []
    if argv[1] == "-m":  # python -m <module> ...
        module, args = argv[2], argv[3:]
        if not _is_module(module) and not module.startswith(("pip", "venv", "pytest")):
            return [f"no module {module}"]
        if module not in ("train", "train.trial"):
            return []  # argparse tools (explain, export, probe) and pip/pytest
        return _override_problems(args, sweep=False)
    script = argv[1]  # the repository's scripts must exist; train.py is nanoGPT's, not ours
    if script.startswith("scripts/") and not (REPO / script).exists():
        return [f"no file {script}"]
    if script in ("sweep.py",):
        return _override_problems(argv[2:], sweep=True)
    return []


def _override_problems(args: list[str], *, sweep: bool) -> list[str]:
    overrides, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in _FLAGS_WITH_VALUE:
            skip = True
        elif not a.startswith("-"):
            overrides.append(a)
    problems = []
    checked = [a for a in overrides if keys.override_key(a) not in KNOWN_TYPOS]
    try:
        keys.check_command_line(
            checked, sweeper_fields=SWEEPER_FIELDS if sweep else (), sweeper_renamed=RENAMED
        )
    except ValueError as exc:
        problems.append(str(exc))
    parser = OverridesParser.create()
    for a in overrides:
        if _PLACEHOLDER.search(a):
            continue
        try:
            parser.parse_overrides([a])
        except Exception as exc:  # Hydra's OverrideParseException and friends
            problems.append(f"{a}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        problems += _choice_problems(a)
    return problems


def _choice_problems(arg: str) -> list[str]:
    """A config-group choice (`search=smoke`, `hydra/launcher=joblib`) that names no config."""
    group, _, value = arg.partition("=")
    if group not in ("model", "data", "search", "hydra/launcher") or not value:
        return []
    names = set()
    for root in (REPO / "conf", REPO / "tests" / "conf"):
        names |= {p.stem for p in (root / group).glob("*.yaml")}
    if group == "hydra/launcher":
        names |= PLUGIN_LAUNCHERS
    bad = [v for v in value.split(",") if v not in names]
    return [f"{group}={v}: no such config ({sorted(names)})" for v in bad]


# --- settings tables --------------------------------------------------------------------------

_ROW = re.compile(
    r"^\| `(hydra\.sweeper\.[a-z_0-9]+(?:\.[a-z_0-9]+)?|[a-z_]+\.[a-z_0-9]+)` "
    r"\| `([^`]*)` \|"
)


def wrong_defaults(text: str) -> list[str]:
    """Table rows `| `key` | `default` | ...` whose default is not the schema's."""
    defaults = {s.key: s.default for s in settings_reference.all_settings()}
    wrong, header = [], []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        if not header:  # a table's first row names its columns
            header = [c.strip() for c in line.strip("|").split("|")]
            continue
        m = _ROW.match(line)
        key, given = (m.group(1), m.group(2)) if m else ("", "")
        if header[1:2] == ["default"] and key in defaults and given != defaults[key]:
            wrong.append(f"{key}: {given} (the schema says {defaults[key]})")
    return wrong


# --- the tests --------------------------------------------------------------------------------


@pytest.fixture(params=sorted(PAGES), ids=str)
def page(request: pytest.FixtureRequest) -> tuple[Path, str, str, list]:
    path = PAGES[request.param]
    text = path.read_text()
    prose, blocks = split_page(text)
    return path, text, prose, blocks


def test_paths_written_as_code_exist(page):
    path, _, prose, _ = page
    assert missing_paths(prose) == [], f"{path.relative_to(REPO)} names files that do not exist"


def test_relative_links_lead_to_files(page):
    path, _, prose, _ = page
    assert broken_links(prose, folder=path.parent) == []


def test_named_keys_exist(page):
    path, text, prose, _ = page
    assert unknown_keys(text, prose) == [], f"{path.relative_to(REPO)}: not in the schema"


def test_shown_commands_parse(page):
    path, _, prose, blocks = page
    problems = [p for c in commands(prose, blocks) for p in command_problems(c)]
    assert problems == [], f"{path.relative_to(REPO)}:\n" + "\n".join(problems)


def test_settings_tables_give_the_schema_defaults(page):
    _, text, _, _ = page
    assert wrong_defaults(text) == []


def test_the_walk_covers_the_readme_and_the_site():
    assert "README.md" in PAGES and "docs/reference/settings.md" in PAGES
    assert len(PAGES) > 10


# --- the checkers themselves ------------------------------------------------------------------


def test_each_checker_finds_what_it_looks_for(tmp_path: Path):
    text = (
        "See `sweeper/verify/race_rules.py` and `sweeper/verify/nope.py`, [x](nope.md).\n"
        "Set `runtime.dtype=bf16` or `runtime.dtyp=bf16`, `hydra.sweeper.n_trials` or "
        "`hydra.sweeper.n_trails`, `runtime.nope` alone, `train.trial` (a module).\n"
        "```bash\npython sweep.py -m search=smoke hydra.sweeper.n_trialz=3\n"
        "python sweep.py -m search=nosuch\npython -m train 'runtime.compile=[a'\n"
        "python scripts/nope.py\n```\n| setting | default | meaning |\n|---|---|---|\n"
        "| `hydra.sweeper.n_trials` | `99` | x |\n"
    )
    prose, blocks = split_page(text)
    assert missing_paths(prose) == ["sweeper/verify/nope.py"]
    assert broken_links(prose, folder=tmp_path) == ["nope.md"]
    assert unknown_keys(text, prose) == ["hydra.sweeper.n_trialz", "runtime.dtyp", "runtime.nope"]
    problems = [p for c in commands(prose, blocks) for p in command_problems(c)]
    expected = [
        "unknown setting hydra.sweeper.n_trialz",
        "search=nosuch: no such config",
        "runtime.compile=[a: OverrideParseException",
        "no file scripts/nope.py",
    ]
    assert len(problems) == len(expected)
    assert all(e in p for p, e in zip(problems, expected, strict=True)), problems
    assert wrong_defaults(text) == ["hydra.sweeper.n_trials: 99 (the schema says 12)"]
