"""Integration tests of the production run (`python -m train`, train/__main__.py) on CPU: it learns,
a killed run resumes without losing or repeating a step, and a pinned best.yaml-style file runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import train.__main__ as main_mod
from tests.conftest import compose_config, fast_overrides, run_cli
from train.run.checkpoint import checkpoint_path, latest_checkpoint, read_header
from train.run.identity import run_identity


class Killed(Exception):
    """Stands in for a SIGKILL between two optimizer steps."""


def test_loss_goes_down_on_the_embedded_data(learning_run) -> None:
    cfg, history = learning_run(
        60, "train.eval_every=30", "train.eval_batches=8", "train.log_every=20"
    )
    val = {h["step"]: h["val_loss"] for h in history if "val_loss" in h}
    assert sorted(val) == [30, 60]
    initial = math.log(cfg.model.vocab_size)  # an untrained model's loss, ~8.32
    assert val[60] < initial - 1.0, val
    assert val[60] < val[30], val
    train_losses = [h["loss"] for h in history if "loss" in h]
    assert len(train_losses) == 3 and all(math.isfinite(x) for x in train_losses)
    assert all(h["tokens_per_s"] > 0 for h in history if "loss" in h)


def _resume_config(make_config, ckpt_dir: Path, *overrides: str):
    # 256 tokens a step (2 x 2 x 64): gradient accumulation is exercised, and 40 steps stay cheap
    return make_config(
        "batch.tokens_per_step=256",
        "batch.micro_batch=2",
        "batch.grad_accum=2",
        "train.max_steps=20",
        "train.log_every=5",
        "train.eval_every=0",
        "checkpoint.every_steps=5",
        f"checkpoint.dir={ckpt_dir}",
        *overrides,
    )


def _run_killed_before_step(cfg, step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run to `train.max_steps` but die when optimizer step `step` (1-based) is about to start."""
    real_step = main_mod.run_step
    calls = 0

    def dying_step(session, **kwargs):
        nonlocal calls
        if calls == step - 1:
            raise Killed
        calls += 1
        return real_step(session, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(main_mod, "run_step", dying_step)
        with pytest.raises(Killed):
            main_mod.run(cfg)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_resume_after_a_kill_matches_an_uninterrupted_run(
    make_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dropout: float
) -> None:
    """Run A trains 20 steps straight; run B is killed after step 10 (its checkpoint written) and
    a second invocation resumes to 20. Bit-identical parameters and optimizer moments prove no
    batch was lost or repeated and the schedule continued where it stopped; with dropout, that
    the random stream continued too (restored from the checkpoint, not re-seeded)."""
    cfg_a = _resume_config(make_config, tmp_path / "a", f"model.dropout={dropout}")
    cfg_b = _resume_config(make_config, tmp_path / "b", f"model.dropout={dropout}")
    summary_a = main_mod.run(cfg_a)

    _run_killed_before_step(cfg_b, 11, monkeypatch)
    assert latest_checkpoint(tmp_path / "b") == checkpoint_path(tmp_path / "b", 10)
    summary_b = main_mod.run(cfg_b)
    assert (summary_b["start_step"], summary_b["end_step"]) == (10, 20)

    final_a = torch.load(checkpoint_path(tmp_path / "a", 20), weights_only=True)
    final_b = torch.load(checkpoint_path(tmp_path / "b", 20), weights_only=True)
    assert final_a["model"].keys() == final_b["model"].keys()
    for name, tensor in final_a["model"].items():
        assert torch.equal(tensor, final_b["model"][name]), name
    states_a, states_b = final_a["optimizer"]["state"], final_b["optimizer"]["state"]
    assert states_a.keys() == states_b.keys()
    for idx, state in states_a.items():
        for key, value in state.items():
            assert torch.equal(value, states_b[idx][key]), (idx, key)
    # the check is sensitive: one step more or less moves every parameter
    at_15 = torch.load(checkpoint_path(tmp_path / "a", 15), weights_only=True)["model"]
    unchanged = [k for k, v in at_15.items() if torch.equal(v, final_a["model"][k])]
    assert unchanged == [], unchanged
    # the logged losses after the resume match the uninterrupted run's, step for step
    losses_a = {h["step"]: h["loss"] for h in summary_a["history"] if h["step"] > 10}
    losses_b = {h["step"]: h["loss"] for h in summary_b["history"]}
    assert losses_a == losses_b and sorted(losses_b) == [15, 20]


def test_pinned_config_file_runs(synthetic_dir: Path, tmp_path: Path) -> None:
    """A best.yaml-style file (`defaults: [train_schema, _self_]` + every section) is a primary
    config: `python -m train --config-path DIR --config-name best` trains from it alone."""
    overrides = fast_overrides(synthetic_dir, tmp_path / "ckpt")
    cfg = compose_config([*overrides, "train.log_every=1", "train.eval_every=0"])
    doc = {
        "defaults": ["train_schema", "_self_"],
        **dataclasses.asdict(cfg),
        "provenance": {"source": "test_train_run", "tokens_per_s": 1234.5},
    }
    conf_dir = tmp_path / "pinned"
    conf_dir.mkdir()
    OmegaConf.save(OmegaConf.create(doc), conf_dir / "best.yaml")

    proc = run_cli(
        "train",
        ["--config-path", str(conf_dir), "--config-name", "best", "train.max_steps=3"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = list((tmp_path / "outputs").rglob("train_summary.json"))
    assert len(summaries) == 1, summaries
    summary = json.loads(summaries[0].read_text())
    assert (summary["start_step"], summary["end_step"]) == (0, 3)
    # log_every=1 came from the file (conf/train.yaml's default is 10): one record per step
    assert [h["step"] for h in summary["history"]] == [1, 2, 3]
    assert not (tmp_path / "ckpt").exists()  # checkpoint.every_steps=0 in the file: no files


# --- whose checkpoint: the run identity on resume (train/run/identity.py) ---------------------


def _short(make_config, ckpt_dir: Path, *overrides: str):
    """5 steps of 256 tokens, a checkpoint every 5: one checkpoint, ckpt_00000005.pt."""
    return _resume_config(make_config, ckpt_dir, "train.max_steps=5", *overrides)


def test_every_checkpoint_records_the_runs_identity(make_config, tmp_path: Path) -> None:
    cfg = _short(make_config, tmp_path / "ck")
    main_mod.run(cfg)
    header = read_header(checkpoint_path(tmp_path / "ck", 5))
    assert header == {"step": 5, "identity": run_identity(cfg)}


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        (("runtime.seed=7",), "runtime.seed 1337 -> 7"),
        (("batch.micro_batch=1", "batch.grad_accum=4"), "batch.grad_accum 2 -> 4"),
    ],
)
def test_a_checkpoint_of_another_run_is_refused_unless_forced(
    make_config, tmp_path: Path, changed: tuple[str, ...], expected: str
) -> None:
    main_mod.run(_short(make_config, tmp_path / "ck"))
    other = _resume_config(make_config, tmp_path / "ck", "train.max_steps=10", *changed)
    with pytest.raises(ValueError, match="belongs to another run") as info:
        main_mod.run(other)
    assert expected in str(info.value) and "\n" not in str(info.value)
    forced = _resume_config(
        make_config, tmp_path / "ck", "train.max_steps=10", "train.resume=force", *changed
    )
    assert main_mod.run(forced)["start_step"] == 5
    never = _resume_config(
        make_config, tmp_path / "fresh", "train.max_steps=5", "train.resume=never", *changed
    )
    assert main_mod.run(never)["start_step"] == 0


def test_a_forced_resume_into_another_shape_is_a_clean_error(make_config, tmp_path: Path) -> None:
    main_mod.run(_short(make_config, tmp_path / "ck"))
    wider = ("model.n_embd=128", "train.resume=force", "train.max_steps=10")
    with pytest.raises(ValueError, match=r"does not fit this model \(size mismatch for") as info:
        main_mod.run(_resume_config(make_config, tmp_path / "ck", *wider))
    assert "\n" not in str(info.value) and "fresh checkpoint.dir" in str(info.value)


def test_a_checkpoint_from_before_identities_resumes_with_a_warning(
    make_config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    main_mod.run(_short(make_config, tmp_path / "ck"))
    path = checkpoint_path(tmp_path / "ck", 5)
    payload = torch.load(path, weights_only=True)
    del payload["identity"]
    torch.save(payload, path)
    with caplog.at_level("WARNING"):
        summary = main_mod.run(_resume_config(make_config, tmp_path / "ck", "train.max_steps=10"))
    assert summary["start_step"] == 5
    assert "records no run identity" in caplog.text
