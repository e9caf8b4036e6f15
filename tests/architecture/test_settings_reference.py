"""docs/reference/settings.md lists every setting with a meaning and is what the code says
(issue 35).

The generator (scripts/settings_reference.py) reads the dataclasses that declare the settings; these
tests hold it to other sources: the trainer keys Hydra's schema has (train.core.keys), the dotted
settings the sweep's command line accepts (`setting_names`) and the old names it refuses, and the
settings `python sweep.py --cfg hydra -p hydra.sweeper` prints.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hydra_plugins.throughput_sweeper.config import RENAMED, setting_names
from tests.sweep_helpers import REPO
from train.core import keys

sys.path.insert(0, str(REPO / "scripts"))
import settings_reference

CHECKED_IN = REPO / "docs" / "reference" / "settings.md"


def listed_keys(text: str) -> set[str]:
    """The keys of the reference's table rows."""
    return set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE))


def test_every_setting_has_a_meaning():
    undocumented = [s.key for s in settings_reference.all_settings() if not s.meaning.strip()]
    assert undocumented == [], (
        f"document these fields with a comment in their dataclass: {undocumented}"
    )


def test_every_trainer_key_and_sweeper_setting_is_listed():
    listed = listed_keys(CHECKED_IN.read_text())
    trainer = {k.split(".")[0] if k.startswith("provenance") else k for k in keys.schema_keys()}
    sweeper = {f"hydra.sweeper.{name}" for name in setting_names()}
    renamed = {f"hydra.sweeper.{old}" for old in RENAMED}  # the table of old flat names
    assert trainer - listed == set(), "trainer keys missing from the reference"
    assert sweeper - listed == set(), "sweeper settings missing from the reference"
    assert renamed - listed == set(), "old sweeper names missing from the renamed table"
    assert listed - trainer - sweeper - renamed == set(), "the reference lists keys the code lacks"


def test_the_checked_in_reference_is_up_to_date():
    assert CHECKED_IN.read_text() == settings_reference.render(), (
        "docs/reference/settings.md is out of date: run python scripts/settings_reference.py"
    )


def test_the_sweep_lists_the_same_sweeper_settings(tmp_path: Path):
    """What the docs say prints the settings does: every setting, none the reference lacks."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "sweep.py"), "--cfg", "hydra", "-p", "hydra.sweeper"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = yaml.safe_load(proc.stdout.split("\n", 1)[1])  # after '# @package hydra.sweeper'
    groups = settings_reference.sweeper_config.groups()
    names = {
        f"{k}.{g}" if k in groups else k
        for k, v in printed.items()
        for g in (v if k in groups else [None])
    }
    listed = {s.key.removeprefix("hydra.sweeper.") for s in settings_reference.sweeper_settings()}
    assert names - {"_target_"} == listed


SOURCE = """
from dataclasses import dataclass


@dataclass
class Example:
    _target_: str = "x"
    plain: int = 1  # the trailing comment
    # the comment above,
    # on two lines
    above: str = ""
    both: int = 2  # the trailing one wins
    # a group comment, then a blank line

    orphan: float = 0.0
    nested: dict[str, int] = None  # types as written
"""


@pytest.mark.parametrize(
    ("name", "annotation", "meaning"),
    [
        ("plain", "int", "the trailing comment"),
        ("above", "str", "the comment above, on two lines"),
        ("both", "int", "the trailing one wins"),
        ("orphan", "float", ""),  # undocumented: the test above refuses such a field
        ("nested", "dict[str, int]", "types as written"),
    ],
)
def test_a_fields_meaning_is_its_comment(tmp_path: Path, name, annotation, meaning):
    path = tmp_path / "example.py"
    path.write_text(SOURCE)
    assert settings_reference.field_comments(path, "Example")[name] == (annotation, meaning)


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (True, "true"),
        ("", "''"),
        ("auto", "auto"),
        ({}, "{}"),
        ([], "[]"),
        (0.02, "0.02"),
        (10_000_000_000, "10000000000"),
    ],
)
def test_defaults_are_written_as_a_user_types_them(value, written):
    assert settings_reference.as_written(value) == written


def test_a_table_cell_escapes_pipes_and_tags():
    assert settings_reference._cell("tpe | random, <name>") == "tpe \\| random, &lt;name>"
