"""scripts/bench/compile_unit.py's trials: the deep narrow CPU default, and gpt2-xl on a GPU (the
9-minute sweep issue's GPU comparison), each key set once."""

from __future__ import annotations

from pathlib import Path

from scripts.bench.compile_unit import _args, isa_probe_s, trial_overrides


def _keys(overrides: list[str]) -> dict[str, str]:
    keys = [o.split("=", 1)[0] for o in overrides]
    assert len(keys) == len(set(keys)), keys  # each key once: no override shadows another
    return dict(o.split("=", 1) for o in overrides)


def test_the_default_is_tiny_at_24_layers_on_the_cpu() -> None:
    o = _keys(trial_overrides(_args([]), Path("/t"), "block", "1-block"))
    assert (o["model"], o["model.n_layer"], o["runtime.device"]) == ("tiny", "24", "cpu")
    assert (o["runtime.compile"], o["runtime.compile_unit"]) == ("default", "block")
    assert o["runtime.compile_cache"] == "off" and "model.n_embd" not in o  # tiny's own 64


def test_gpt2_xl_on_a_gpu_keeps_its_preset_shape() -> None:
    argv = ["--device", "cuda", "--model", "gpt2-xl", "--block-size", "1024", "--dtype", "bf16"]
    argv += ["--micro-batch", "16", "--grad-accum", "4", "--steps", "5"]
    o = _keys(trial_overrides(_args(argv), Path("/t"), "model", "1-model"))
    assert (o["model"], o["runtime.device"], o["runtime.dtype"]) == ("gpt2-xl", "cuda", "bf16")
    assert o["batch.tokens_per_step"] == str(16 * 4 * 1024) and o["model.block_size"] == "1024"
    assert "model.n_layer" not in o and "model.n_embd" not in o


def test_no_isa_probe_on_a_gpu(tmp_path: Path) -> None:
    assert isa_probe_s(tmp_path / "never-made", device="cuda") == 0.0
    assert not (tmp_path / "never-made").exists()
