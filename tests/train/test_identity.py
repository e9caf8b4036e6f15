"""train/run/identity.py: what a run identity holds, how two differ, and the resume rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from train.core.config import Config, TrainConfig
from train.run.identity import check_resume, format_diff, identity_diff, identity_hash, run_identity


def _cfg(**sections: dict) -> Config:
    cfg = Config()
    for section, values in sections.items():
        setattr(cfg, section, dataclasses.replace(getattr(cfg, section), **values))
    return cfg


def test_identity_holds_what_decides_the_weights_and_batches_and_no_speed_knob() -> None:
    ident = run_identity(Config())
    assert {
        "model.n_layer",
        "model.n_embd",
        "runtime.seed",
        "data.dir",
        "batch.micro_batch",
        "batch.grad_accum",
        "batch.tokens_per_step",
        "optim.lr",
    } <= set(ident)
    for speed in (
        "runtime.compile",
        "runtime.dtype",
        "runtime.attention",
        "data.num_workers",
        "checkpoint.mode",
        "model.name",
        "train.max_steps",
    ):
        assert speed not in ident
    assert ident["data.dir"] == str(Path("data/synthetic").resolve())
    assert list(ident) == sorted(ident)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"runtime": {"seed": 7}}, "runtime.seed"),
        ({"batch": {"micro_batch": 4, "grad_accum": 16}}, "batch.micro_batch"),
        ({"model": {"n_layer": 3}}, "model.n_layer"),
        ({"data": {"dir": "/elsewhere"}}, "data.dir"),
        ({"optim": {"lr": 1e-3}}, "optim.lr"),
    ],
)
def test_a_change_that_moves_the_weights_changes_the_identity(change: dict, key: str) -> None:
    base, other = run_identity(Config()), run_identity(_cfg(**change))
    assert identity_hash(base) != identity_hash(other)
    assert key in [k for k, _, _ in identity_diff(base, other)]


@pytest.mark.parametrize(
    "change",
    [
        {"runtime": {"compile": "default", "threads": 3}},
        {"model": {"name": "renamed"}},
        {"train": {"max_steps": 999}},
        {"checkpoint": {"mode": "async", "keep": 5}},
    ],
)
def test_speed_knobs_and_labels_keep_the_identity(change: dict) -> None:
    assert identity_hash(run_identity(Config())) == identity_hash(run_identity(_cfg(**change)))


def test_a_nested_dict_and_the_dataclass_give_one_identity() -> None:
    cfg = Config()
    assert run_identity(dataclasses.asdict(cfg)) == run_identity(cfg)


def test_diff_names_old_and_new_and_missing_keys() -> None:
    diff = identity_diff({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": "x"})
    assert diff == [("b", 2, 3), ("c", None, "x")]
    assert format_diff(diff) == "b 2 -> 3, c None -> 'x'"


def test_check_resume() -> None:
    path, ident = Path("/ck/ckpt_00000010.pt"), run_identity(Config())
    assert check_resume(saved=ident, current=ident, path=path, mode="auto") is None
    other = run_identity(_cfg(runtime={"seed": 7}))
    with pytest.raises(ValueError) as info:
        check_resume(saved=ident, current=other, path=path, mode="auto")
    message = str(info.value)
    assert "\n" not in message
    assert "runtime.seed 1337 -> 7" in message
    assert "fresh checkpoint.dir" in message and "train.resume=force" in message
    forced = check_resume(saved=ident, current=other, path=path, mode="force")
    assert forced is not None and "runtime.seed 1337 -> 7" in forced
    old = check_resume(saved=None, current=ident, path=path, mode="auto")
    assert old is not None and "records no run identity" in old


def test_train_resume_is_validated() -> None:
    with pytest.raises(ValueError, match=r"train\.resume must be one of .*'sometimes'"):
        TrainConfig(resume="sometimes")


def test_changed_data_at_the_same_path_is_another_runs(tmp_path) -> None:
    from train.core.config import Config, DataConfig

    (tmp_path / "train.bin").write_bytes(bytes(range(256)) * 100)
    cfg = Config(data=DataConfig(dir=str(tmp_path)))
    before = run_identity(cfg)
    assert before["data.train_bytes"] == 25600 and len(before["data.train_fingerprint"]) == 16
    # a checkpoint from before fingerprints were recorded resumes as it did
    old = {
        k: v for k, v in before.items() if k not in ("data.train_bytes", "data.train_fingerprint")
    }
    assert check_resume(saved=old, current=before, path=Path("/ck/x.pt"), mode="auto") is None
    (tmp_path / "train.bin").write_bytes(bytes(range(256)) * 99)  # cut short
    with pytest.raises(ValueError, match=r"data.train_bytes 25600 -> 25344.*data.train_finger"):
        check_resume(saved=before, current=run_identity(cfg), path=Path("/ck/x.pt"), mode="auto")
