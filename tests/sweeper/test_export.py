"""best.yaml: document layout, sweep-only keys reset, YAML round trip, the train command."""

from __future__ import annotations

import copy
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from sweeper.report.best_yaml import (
    SWEEP_ONLY_TRIAL_DEFAULTS,
    TRAINER_SECTIONS,
    best_config_document,
    best_header,
    export_winner,
    own_checkpoint_dir,
    train_command,
    write_best_yaml,
)
from sweeper.verify.winner import Candidate, RaceEnd, Verdict


def _trainer_config() -> dict:
    return {
        "model": {
            "name": "tiny",
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 64,
            "block_size": 64,
            "vocab_size": 512,
            "dropout": 0.0,
            "bias": True,
        },
        "data": {
            "dir": "data/synthetic",
            "train_file": "train.bin",
            "val_file": "val.bin",
            "format": "auto",
            "num_workers": 2,
            "pin_memory": True,
        },
        "batch": {"tokens_per_step": 4096, "micro_batch": 8, "grad_accum": 8},
        "optim": {"lr": 6e-4, "min_lr": 6e-5, "fused": "auto"},
        "checkpoint": {"every_steps": 0, "dir": "checkpoints", "mode": "sync"},
        "runtime": {"device": "auto", "dtype": "auto", "compile": "default", "threads": 0},
        "ddp": {"bucket_cap_mb": 25.0, "static_graph": False},
        "trial": {
            "warmup_steps": 3,
            "max_steps": 20,
            "out": "/sweep/job3/result.json",
            "progress_file": "/sweep/job3/progress.jsonl",
            "study_storage": "sqlite:////sweep/study.db",
            "study_name": "s1",
            "trial_id": 7,
            "project_above_s": 5.0,
        },
        "train": {"max_steps": 200, "log_every": 10},
    }


def decided_winner(job_dir: Path, *, rounds: int) -> SimpleNamespace:
    """Trial 7 as a decided race leaves it: its job folder, its torch, `rounds` rounds."""
    return SimpleNamespace(
        number=7,
        trial=SimpleNamespace(user_attrs={"job_dir": str(job_dir)}),
        results=[{"fingerprint": {"torch": "2.13.0"}}],
        verdict=Verdict(
            winner=Candidate(key="k", params={}, overrides=[], values=[1.0], simplicity=0),
            ranking=[],
            decisive=True,
            kind="race_won",
            race=RaceEnd(
                rounds=rounds, chosen=7, survivors=1, dropped=((3, 2),), failed=(), open_pairs=()
            ),
        ),
        outcome="decided",
        rounds=rounds,
        lead_over_start=None,
    )


def _doc(**overrides) -> dict:
    kwargs = {
        "trainer_config": _trainer_config(),
        "metrics": {"tokens_per_s": 51234.5, "cv": 0.012, "n": 3, "mfu_spec": None},
        "fingerprint": {"torch": "2.13.0", "gpu": {"name": "H100", "count": 1}},
        "command": "python sweep.py -m search=throughput",
        "sweep": {
            "study": "s1",
            "storage": "sqlite:////sweep/study.db",
            "trials": [3, 5],
            "when": "2025-01-01T00:00:00+00:00",
        },
        "base_dir": Path("/work/run"),
    }
    kwargs.update(overrides)
    return best_config_document(**kwargs)


def test_document_layout() -> None:
    doc = _doc()
    assert list(doc) == ["defaults", "pinned_sections", *TRAINER_SECTIONS, "provenance"]
    assert doc["pinned_sections"] == [*TRAINER_SECTIONS, "provenance"]
    assert doc["defaults"] == ["train_schema", "_self_"]
    given = _trainer_config()
    for section in ("model", "batch", "optim", "checkpoint", "runtime", "train"):
        assert doc[section] == given[section]
    assert set(doc["provenance"]) == {"metrics", "fingerprint", "command", "sweep"}
    assert doc["provenance"]["sweep"]["trials"] == [3, 5]
    assert doc["provenance"]["metrics"]["tokens_per_s"] == 51234.5


def test_sweep_only_trial_keys_are_reset() -> None:
    trial = _doc()["trial"]
    for key, default in SWEEP_ONLY_TRIAL_DEFAULTS.items():
        assert trial[key] == default
    assert trial == {
        "warmup_steps": 3,
        "max_steps": 20,
        "project_above_s": 5.0,
        **SWEEP_ONLY_TRIAL_DEFAULTS,
    }


@pytest.mark.parametrize(
    ("data_dir", "expected"),
    [
        ("data/synthetic", "/work/run/data/synthetic"),
        ("/abs/tokens", "/abs/tokens"),
        ("/abs/../abs/tokens", "/abs/tokens"),
    ],
)
def test_data_dir_is_absolute(data_dir: str, expected: str) -> None:
    cfg = _trainer_config()
    cfg["data"]["dir"] = data_dir
    assert _doc(trainer_config=cfg)["data"]["dir"] == expected


def test_input_is_not_mutated_and_extra_keys_dropped() -> None:
    cfg = _trainer_config()
    cfg["hydra"] = {"run": {"dir": "x"}}
    cfg["provenance"] = {"old": 1}
    cfg["defaults"] = ["train_schema"]
    cfg["hooks"] = {"fault": "coarse_weights", "inject_latency_s": 0.25}  # a test sweep's
    before = copy.deepcopy(cfg)
    doc = _doc(trainer_config=cfg)
    assert cfg == before
    assert "hydra" not in doc
    assert "hooks" not in doc  # a test hook never reaches a config to train
    assert "old" not in doc["provenance"]


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda c: c.pop("optim"), r"lacks section\(s\) \['optim'\]"),
        (lambda c: c.update(extra={"x": 1}), r"key\(s\) \['extra'\]"),
    ],
)
def test_bad_trainer_config(mutate, match: str) -> None:
    cfg = _trainer_config()
    mutate(cfg)
    with pytest.raises(ValueError, match=match):
        _doc(trainer_config=cfg)


def test_storage_password_masked_and_when_filled() -> None:
    doc = _doc(sweep={"study": "s", "storage": "postgresql://u:pw@h/db", "trials": [1]})
    sweep = doc["provenance"]["sweep"]
    assert sweep["storage"] == "postgresql://u:***@h/db"
    assert sweep["when"].startswith("20") and sweep["when"].endswith("+00:00")


def test_write_round_trips(tmp_path: Path) -> None:
    doc = _doc(command="python sweep.py -m 'hydra.sweep.dir=${oc.env:HOME}/x'")
    path = write_best_yaml(tmp_path / "out" / "best.yaml", doc, header="line one\nline two")
    text = path.read_text()
    assert text.startswith("# line one\n# line two\n")
    body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert body[0] == "defaults:"
    loaded = OmegaConf.load(path)
    assert next(iter(loaded.keys())) == "defaults"
    # literal `${` survives: escaped in the file, back to the original text once resolved
    assert OmegaConf.to_container(loaded, resolve=True) == doc
    assert loaded.trial.study_storage == "" and loaded.trial.trial_id == -1
    assert not list(path.parent.glob("*.tmp"))


def test_write_replaces_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    path.write_text("stale: true\n")
    write_best_yaml(path, _doc(), header="h")
    assert "stale" not in OmegaConf.load(path)


def test_non_plain_values_become_text(tmp_path: Path) -> None:
    doc = _doc(fingerprint={"where": Path("/x/y"), "shape": (1, 2)})
    assert doc["provenance"]["fingerprint"] == {"where": "/x/y", "shape": [1, 2]}
    path = write_best_yaml(tmp_path / "best.yaml", doc, header="h")
    assert OmegaConf.to_container(OmegaConf.load(path), resolve=True) == doc


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/runs/sweep/best.yaml", "python -m train --config-path /runs/sweep --config-name best"),
        (
            "/runs/my sweep/pinned.yaml",
            "python -m train --config-path '/runs/my sweep' --config-name pinned",
        ),
    ],
)
def test_train_command(path: str, expected: str) -> None:
    assert train_command(Path(path)) == expected


def test_train_command_relative_path_becomes_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = shlex.split(train_command(Path("out/best.yaml")))
    assert args[args.index("--config-path") + 1] == str(tmp_path.resolve() / "out")


def test_header() -> None:
    header = best_header(best_path=Path("/r/best.yaml"), median_tokens_per_s=51234.5, cv=0.012, n=3)
    assert "python -m train --config-path /r --config-name best" in header
    assert "51,234 tokens/s median ± 1.2% (CV over 3 runs)" in header
    single = best_header(best_path=Path("/r/best.yaml"), median_tokens_per_s=10.0, cv=None, n=1)
    assert "10 tokens/s median (n=1)" in single


def test_modules_stay_light() -> None:
    # the sweeper must never pull in torch; it may import train's torch-free modules
    # (train/core/, guarded by tests/architecture/test_torch_free.py), e.g. train.core.cost
    code = (
        "import sys, sweeper.report.best_yaml, sweeper.study.objective, sweeper.verify.winner; "
        "print(sorted(m for m in ('torch',) if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("measured", "study", "trial", "expected"),
    [
        ("checkpoints", "s1", 3, "/work/run/checkpoints/s1/trial-3"),
        ("/fast/nvme/ck", "s1", 3, "/fast/nvme/ck/s1/trial-3"),
        ("checkpoints", "s2", 3, "/work/run/checkpoints/s2/trial-3"),
        ("checkpoints", "my study/x", 12, "/work/run/checkpoints/my_study_x/trial-12"),
    ],
)
def test_own_checkpoint_dir(measured: str, study: str, trial: int, expected: str) -> None:
    got = own_checkpoint_dir(measured, study=study, trial=trial, base_dir=Path("/work/run"))
    assert got == expected


def test_document_takes_the_runs_own_checkpoint_dir() -> None:
    assert _doc()["checkpoint"]["dir"] == "checkpoints"  # as given, when none is named
    doc = _doc(checkpoint_dir="/work/run/checkpoints/s1/trial-3")
    assert doc["checkpoint"] == {
        **_trainer_config()["checkpoint"],
        "dir": "/work/run/checkpoints/s1/trial-3",
    }


def test_exported_winner_never_pins_the_shared_checkpoint_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sweeps' best.yaml files (two studies) train into two folders of their own, under
    the checkpoint disk the trials measured, never the shared `checkpoints/`."""
    monkeypatch.chdir(tmp_path)
    dirs = []
    for study in ("first", "second"):
        job_dir = tmp_path / study / "job7"
        job_dir.mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(_trainer_config()), job_dir / "trial_config.yaml")
        winner = decided_winner(job_dir, rounds=3)
        row = {"trial": 7, "tokens_per_s": 1000.0, "n": 3, "cv": 0.01, "params": {}}
        path = export_winner(
            winner,
            [row],
            sweep_dir=tmp_path / study,
            study_name=study,
            storage="sqlite:///x.db",
            planned_checkpoint_every=0,
        )
        dirs.append(OmegaConf.load(path).checkpoint.dir)
        assert OmegaConf.load(path).provenance.sweep.verdict == (
            "trial 7 wins the race after 3 rounds: every other contender was proved slower "
            "(trial 3 after round 2)."
        )
    assert dirs == [str(tmp_path / "checkpoints" / s / "trial-7") for s in ("first", "second")]


def test_best_yaml_pins_the_threads_the_race_ran_with_and_names_the_winners_runs(tmp_path):
    """Race runs that had 1 torch thread (a launcher's cap, OMP_NUM_THREADS=1, where the race
    could not ask for the production count: tests/integration/test_race_threads.py): best.yaml pins
    1, not the trial's 0 (torch's default), and says so; its runs are the job
    folders of trial 7's search run and race runs, which `train.explain --result` reads."""
    from sweeper.report.best_yaml import pin_measured_threads, winner_runs

    pinned = {"runtime": {"threads": 0}}
    said = pin_measured_threads(pinned, [{"fingerprint": {"torch_threads": 1}}, None] * 2)
    assert pinned["runtime"]["threads"] == 1 and said["threads"] == 1 and said["requested"] == 0
    pinned = {"runtime": {"threads": 0}}
    assert pin_measured_threads(pinned, [{"fingerprint": {}}])["threads"] == 0
    assert pinned["runtime"]["threads"] == 0
    search_run = SimpleNamespace(user_attrs={"job_dir": str(tmp_path / "3")})
    winner = SimpleNamespace(number=7, trial=search_run)
    race = {"rounds": [{"7": {"job_dir": str(tmp_path / "9")}, "2": {}}, {"7": None}]}
    assert winner_runs(winner, race, sweep_dir=tmp_path) == ["3", "9"]
