"""train/core/config_file.py: a config file read before Hydra, and train/core/paths.py: paths a run
writes, checked before any step. Pure and table-tested; the real commands are in
tests/integration/test_bad_inputs.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweeper.report.best_yaml import PINNED_SECTIONS, best_config_document, write_best_yaml
from train.core.config import Config
from train.core.config_file import (
    missing_sections,
    primary_config_file,
    read_config_file,
    read_pinned_config,
)
from train.core.paths import check_file_target, check_folder_target, folder_problem


@pytest.fixture
def best(tmp_path: Path) -> Path:
    """A best.yaml as the sweep exports it."""
    doc = best_config_document(
        trainer_config=OmegaConf.to_container(OmegaConf.structured(Config)),
        metrics={"tokens_per_s": 1000.0},
        fingerprint={"torch": "x"},
        command="python sweep.py -m",
        sweep={"study": "s", "trial": 3},
    )
    return write_best_yaml(tmp_path / "sweep" / "best.yaml", doc, header="Tuned.")


def test_an_exported_file_reads_back_whole(best: Path) -> None:
    doc = read_pinned_config(best)
    assert doc["pinned_sections"] == list(PINNED_SECTIONS)
    assert missing_sections(doc) == []


def test_every_cut_before_provenance_is_refused(best: Path) -> None:
    """Whatever line a copy stops at, a trainer section never silently falls back to the
    schema's defaults: the file is refused unless only provenance (never read) was cut."""
    lines = best.read_text().splitlines(keepends=True)
    end = lines.index("provenance:\n")
    cut = best.with_name("cut.yaml")
    for n in range(len(lines)):
        cut.write_text("".join(lines[:n]))
        if n > end + 1:  # "provenance:" and some of its lines: the trainer's part is whole
            read_pinned_config(cut)
            continue
        refusal = r"lacks pinned section|is empty|sets no config section"
        with pytest.raises(ValueError, match=refusal) as info:
            read_pinned_config(cut)
        assert str(cut) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"model:\n  name: caf\xe9\n", r"is not UTF-8 text \(byte 0xe9 at line 2\)"),
        (b"model:\n  lr: [0.1\n", r"is not valid YAML \(line 3, column 1: expected ',' or ']'"),
        (b"model: {}\nmodel: {}\n", r"is not valid YAML \(line 2, column 1: found duplicate key"),
        (b"data:\n  dir: ${oops\n", r"cannot be parsed"),
        (b"", r"is empty: restore it"),
        (b"# only a comment\n", r"is empty"),
        (b"- model\n- batch\n", r"holds a list, not a mapping"),
    ],
    ids=["latin-1", "unclosed", "duplicate", "interpolation", "empty", "comment", "list"],
)
def test_a_broken_file_is_one_line(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "best.yaml"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match) as info:
        read_config_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_file_that_pins_nothing_is_not_checked(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  n_layer: 2\n")  # hand-written, no pinned_sections
    assert read_pinned_config(path) == {"model": {"n_layer": 2}}
    assert missing_sections({"pinned_sections": ["model", "train"], "model": {}}) == [
        "model",
        "train",
    ]


@pytest.mark.parametrize(
    ("args", "index", "name"),
    [
        (["--config-path", "sweep", "--config-name", "best"], 1, "best.yaml"),
        (["--config-path=sweep", "--config-name=best.yaml", "a=1"], 0, "best.yaml"),
        (["-cp", "sweep", "-cn", "best"], 1, "best.yaml"),
        (["-cp=sweep", "train.max_steps=3"], 0, "train.yaml"),  # Hydra's default name
    ],
)
def test_the_primary_config_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], index: int, name: str
) -> None:
    """A relative --config-path is the user's folder, made absolute for Hydra (which would take
    it relative to train/)."""
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / name).write_text("model: {}\n")
    monkeypatch.chdir(tmp_path)
    out, file = primary_config_file(args)
    assert file == tmp_path / "sweep" / name
    assert out[index].endswith(str(tmp_path / "sweep"))
    assert [a for i, a in enumerate(out) if i != index] == [
        a for i, a in enumerate(args) if i != index
    ]


def test_the_primary_config_must_exist(tmp_path: Path) -> None:
    assert primary_config_file(["a=1"]) == (["a=1"], None)  # the project's own conf/
    with pytest.raises(ValueError, match=r"--config-path .*/nope is not a folder"):
        primary_config_file(["--config-path", str(tmp_path / "nope")])
    (tmp_path / "best.yaml").write_text("model: {}\n")
    with pytest.raises(ValueError, match=r"--config-name bets: there is no .*holds: best.yaml"):
        primary_config_file(["--config-path", str(tmp_path), "--config-name", "bets"])


def test_folder_problem(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert folder_problem(tmp_path / "new" / "deeper") is None
    assert folder_problem(tmp_path) is None
    assert list(tmp_path.iterdir()) == [tmp_path / "file"]  # the probe left nothing
    assert folder_problem(tmp_path / "file") == f"{tmp_path / 'file'} is a file, not a folder"
    assert folder_problem(tmp_path / "file" / "x") == f"{tmp_path / 'file'} is a file, not a folder"
    assert "/proc takes no new files" in folder_problem(Path("/proc/nope"))


def test_targets(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    check_file_target("trial.out", tmp_path / "a" / "r.json", example_name="trial.json")
    with pytest.raises(ValueError, match=r"trial.out=.* is a folder: name a file, e\.g\."):
        check_file_target("trial.out", tmp_path, example_name="trial.json")
    with pytest.raises(
        ValueError,
        match=r"checkpoint.dir=.*/file/ck cannot be written: .*/file "
        r"is a file, not a folder; set checkpoint.dir to a folder",
    ):
        check_folder_target("checkpoint.dir", tmp_path / "file" / "ck")
