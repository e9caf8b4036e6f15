"""train/trial/pinned.py: `python -m train.trial --pinned FILE`, the sweeper children's entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweeper.launch.job import pin_config, study_overrides, write_trial_config
from tests.conftest import compose_dictconfig, fast_overrides, run_cli
from train.core.config import trainer_schema


@pytest.fixture
def pinned(synthetic_dir: Path, tmp_path: Path) -> Path:
    dcfg = compose_dictconfig(
        [*fast_overrides(synthetic_dir, tmp_path / "ckpt"), "runtime.threads=1"]
    )
    return write_trial_config(pin_config(dcfg), tmp_path)


def test_a_pinned_file_measures_what_the_hydra_command_line_does(synthetic_dir, tmp_path, pinned):
    hydra_run = run_cli(
        "train.trial",
        [
            *fast_overrides(synthetic_dir, tmp_path / "ckpt"),
            "runtime.threads=1",
            f"hydra.run.dir={tmp_path / 'hydra'}",
            f"trial.out={tmp_path / 'hydra.json'}",
        ],
        cwd=tmp_path,
    )
    assert hydra_run.returncode == 0, hydra_run.stderr[-2000:]
    pinned_run = run_cli(
        "train.trial",
        ["--pinned", str(pinned), f"trial.out={tmp_path / 'pinned.json'}"],
        cwd=tmp_path,
    )
    assert pinned_run.returncode == 0, pinned_run.stderr[-2000:]
    a = json.loads((tmp_path / "hydra.json").read_text())
    b = json.loads((tmp_path / "pinned.json").read_text())
    assert a["status"] == b["status"] == "complete"
    assert a["loss"] == b["loss"]  # same config, seed and batches: the same training
    for section in ("model", "batch", "runtime", "data", "optim", "checkpoint"):
        assert a["config"][section] == b["config"][section], section
    assert "trial complete" in pinned_run.stdout
    assert "[train.model.gpt][INFO]" in pinned_run.stderr  # log lines in Hydra's job-log format
    assert not (tmp_path / ".hydra").exists()  # nothing composed, no run dir made


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # a type the schema refuses; a key it lacks: named, with the type or the nearest key
        ({"batch": {"micro_batch": "many"}}, "batch.micro_batch = 'many' is not an int"),
        (
            {"runtime": {"float8_emulat": 1}},
            "runtime.float8_emulat is not a setting of the "
            "trainer (did you mean runtime.float8_emulate?)",
        ),
        ({"trial": {"max_steps": 1}}, "trial.max_steps"),  # a value __post_init__ refuses
    ],
)
def test_an_invalid_pinned_config_leaves_an_invalid_config_result(tmp_path, pinned, edit, message):
    doc = OmegaConf.merge(OmegaConf.load(pinned), edit)
    OmegaConf.save(doc, pinned)
    proc = run_cli("train.trial", ["--pinned", str(pinned), "trial.out=res.json"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    result = json.loads((pinned.parent / "res.json").read_text())  # relative to the file's dir
    assert result["status"] == "failed"
    assert result["failure"]["kind"] == "invalid_config"
    assert message in result["failure"]["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["trial.max_steps=2,3"], "plain key=value overrides"),
        ([], "No such file"),
    ],
)
def test_bad_pinned_invocations_fail_clearly(tmp_path, pinned, args, message):
    path = str(pinned) if args else str(tmp_path / "missing.yaml")
    proc = run_cli("train.trial", ["--pinned", path, *args], cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr


STUDY = {"study_storage": "sqlite:////tmp/x y/optuna.db", "study_name": "s", "trial_id": 7}


def test_a_re_run_of_a_pinned_file_never_attaches_to_the_sweeps_study(tmp_path, pinned):
    """A file that names a study (one written before the study left trial_config.yaml) runs
    reporting to none: no "step already reported", no pruning; the command line still can."""
    from train.trial.pinned import load_raw

    doc = OmegaConf.load(pinned)
    OmegaConf.update(doc, "trial", STUDY, merge=True)
    OmegaConf.save(doc, pinned)
    raw = OmegaConf.merge(OmegaConf.structured(trainer_schema()), load_raw(pinned, []))
    assert (raw.trial.study_storage, raw.trial.study_name, raw.trial.trial_id) == ("", "", -1)
    given = load_raw(pinned, ["trial.study_storage=sqlite:///o.db", "trial.trial_id=3"])
    assert (given.trial.study_storage, given.trial.trial_id) == ("sqlite:///o.db", 3)


def test_the_sweeper_passes_the_study_on_the_command_line_not_in_the_file(tmp_path):
    """sweeper/launch/job.py: the study settings leave the document and become overrides that
    read back as the same values."""
    from train.trial.pinned import apply_overrides

    doc = {"trial": {**STUDY, "out": "trial.json"}}
    overrides = study_overrides(doc)
    assert doc == {"trial": {"out": "trial.json"}}
    back = OmegaConf.create({"trial": {}})
    apply_overrides(back, overrides)
    assert OmegaConf.to_container(back.trial) == STUDY
    assert study_overrides({"trial": {"study_storage": "", "study_name": "", "trial_id": -1}}) == []
