"""runtime.float8 (torchao float8 training) and runtime.attention's flash implementations (#22).

- the torch-free refusal rule, by table, with the device facts faked (a CPU, an A100's 8.0, an
  L4's 8.9, an H100's 9.0, torchao missing) and through the trainer's check_combinations;
- which linears the filter converts in gpt2-xl and tiny (built on the meta device);
- a tiny model trains 50 steps with float8 tensorwise emulated on this CPU through the real
  trainer, its loss finite and falling;
- without emulate, `python -m train` refuses in one line (exit 2), `python -m train.trial` in one
  error line and its summary (exit 2, the failure recorded as invalid_config).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli
from train.core.config import ModelConfig
from train.core.config_checks import check_combinations
from train.core.rules import flash_impl_unsupported, float8_unsupported
from train.model.float8 import float8_report, left_out_reason, plan

CPU_REFUSAL = (
    "runtime.float8=tensorwise needs a CUDA GPU with compute capability >= 8.9 (float8 tensor "
    "cores), and this run's device is cpu; use such a GPU, or runtime.float8_emulate=true to "
    "test the plumbing (emulated, no speed-up)"
)

# (float8, dtype, device_type, capability, emulate, torchao, words of the refusal or None)
RULE_CASES = [
    ("none", "fp32", "cpu", None, False, False, None),
    ("tensorwise", "bf16", "cpu", None, False, True, CPU_REFUSAL),
    ("tensorwise", "fp32", "cpu", None, False, True, CPU_REFUSAL),  # the device first
    ("tensorwise", "bf16", "cpu", None, True, True, None),  # emulate: plumbing on a CPU
    ("rowwise", "auto", "cpu", None, True, True, "needs runtime.dtype=bf16"),  # auto = fp32 here
    ("tensorwise", "bf16", "cuda", (8, 0), False, True, "this GPU has 8.0"),  # A100
    ("tensorwise", "bf16", "cuda", (8, 6), False, True, "this GPU has 8.6"),  # A10
    ("tensorwise", "bf16", "cuda", (8, 9), False, True, None),  # L4 (Ada)
    ("rowwise", "auto", "cuda", (9, 0), False, True, None),  # H100: auto resolves to bf16
    ("rowwise", "bf16", "cuda", (10, 0), False, True, None),  # B200
    ("tensorwise", "fp16", "cuda", (9, 0), False, True, "needs runtime.dtype=bf16"),
    ("tensorwise", "fp32", "cuda", (9, 0), False, True, "got runtime.dtype=fp32 (fp32)"),
    ("tensorwise", "bf16", "cuda", (8, 0), True, True, None),  # emulated on an A100
    ("tensorwise", "bf16", "cuda", (9, 0), False, False, "needs torchao, which is not installed"),
    ("rowwise", "bf16", "cuda", None, False, True, None),  # a plan device: capability unknown
]


@pytest.mark.parametrize("float8,dtype,device_type,cap,emulate,torchao,words", RULE_CASES)
def test_the_float8_rule(float8, dtype, device_type, cap, emulate, torchao, words) -> None:
    got = float8_unsupported(
        float8,
        dtype=dtype,
        device_type=device_type,
        capability=cap,
        emulate=emulate,
        torchao=torchao,
    )
    if words is None:
        assert got is None
    else:
        assert got is not None and (got.key, got.value) == ("runtime.float8", float8)
        assert words in str(got) and str(got).startswith(f"runtime.float8={float8} ")
        assert "\n" not in str(got)


def test_the_float8_rule_probes_torchao_without_importing_it() -> None:
    # torchao is installed in this venv; the probe answers from its spec alone
    assert (
        float8_unsupported("tensorwise", dtype="bf16", device_type="cuda", capability=(9, 0))
        is None
    )


# (attention, device_type, installed, words or None)
IMPL_CASES = [
    ("fa3", "cpu", ["fa3", "fa4"], "this run's device is cpu"),
    ("fa3", "cuda", [], "no such flash attention implementation is installed"),
    ("fa4", "cuda", ["fa3"], "no such flash attention implementation is installed"),
    ("fa3", "cuda", ["fa3"], None),
    ("fa3", "cuda", None, None),  # a plan device: what is installed there is not known
    ("flash", "cpu", [], None),  # SDPA's own backends are not this rule's
]


@pytest.mark.parametrize("attention,device_type,installed,words", IMPL_CASES)
def test_the_flash_impl_rule(attention, device_type, installed, words) -> None:
    got = flash_impl_unsupported(attention, device_type=device_type, installed=installed)
    if words is None:
        assert got is None
    else:
        assert words in str(got) and str(got).startswith(f"runtime.attention={attention}")
        assert (got.key, got.value) == ("runtime.attention", attention) and words in got.reason


def test_the_trainer_applies_both_rules(make_config) -> None:
    cfg = make_config("runtime.float8=tensorwise", "runtime.dtype=bf16")
    with pytest.raises(ValueError, match=r"this GPU has 8\.0"):
        check_combinations(cfg, device_type="cuda", dtype="bf16", capability=(8, 0))
    check_combinations(cfg, device_type="cuda", dtype="bf16", capability=(9, 0))
    with pytest.raises(ValueError, match=r"runtime\.attention=fa3 is a CUDA flash"):
        check_combinations(make_config("runtime.attention=fa3"), device_type="cpu")


def _meta_gpt(**shape):
    from train.model.gpt import GPT

    with torch.device("meta"):
        return GPT(ModelConfig(**shape))


XL = dict(name="gpt2-xl", n_layer=48, n_head=25, n_embd=1600, block_size=1024, vocab_size=50304)


@pytest.mark.parametrize(
    "recipe,emulate,converted",
    [
        # all four block linears pass torchao's tensorwise thresholds at n_embd 1600
        ("tensorwise", False, {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}),
        # rowwise: out <= 2048 leaves out both output projections (1600 wide)
        ("rowwise", False, {"attn.c_attn", "mlp.c_fc"}),
    ],
)
def test_the_filter_on_gpt2_xl(recipe: str, emulate: bool, converted: set[str]) -> None:
    summary = plan(_meta_gpt(**XL), recipe=recipe, emulate=emulate)
    assert summary.left_out["lm_head"] == "tied LM head stays bf16"
    blocks = {fqn.split(".", 3)[3] for fqn in summary.converted}
    assert blocks == converted
    assert len(summary.converted) == 48 * len(converted)


def test_the_filter_on_tiny() -> None:
    model = _meta_gpt()  # n_embd 64: every linear far below torchao's thresholds
    assert plan(model, recipe="tensorwise", emulate=False).converted == []
    emulated = plan(model, recipe="tensorwise", emulate=True)  # the plumbing: sizes ignored
    assert len(emulated.converted) == 2 * 4 and "lm_head" in emulated.left_out


@pytest.mark.parametrize(
    "fqn,out_f,in_f,recipe,emulate,words",
    [
        ("lm_head", 50304, 1600, "tensorwise", True, "tied LM head"),
        ("transformer.h.0.mlp.c_fc", 100, 64, "tensorwise", True, "multiples of 16"),
        ("transformer.h.0.attn.c_proj", 1024, 4096, "tensorwise", False, "too small"),
        ("transformer.h.0.attn.c_proj", 1040, 4096, "tensorwise", False, ""),
        ("transformer.h.0.mlp.c_fc", 4096, 2048, "rowwise", False, "too small"),
        ("transformer.h.0.mlp.c_fc", 4112, 2048, "rowwise", False, ""),
    ],
)
def test_left_out_reason(fqn, out_f, in_f, recipe, emulate, words) -> None:
    got = left_out_reason(fqn, out_features=out_f, in_features=in_f, recipe=recipe, emulate=emulate)
    assert (got == "") if not words else (words in got)


def test_a_tiny_model_trains_50_steps_in_emulated_float8(learning_run) -> None:
    """The real trainer (python -m train's run) with runtime.float8=tensorwise emulated on this
    CPU: the blocks' linears are torchao Float8Linear and the loss stays finite and falls."""
    cfg, history = learning_run(
        50,
        "runtime.dtype=bf16",
        "runtime.float8=tensorwise",
        "runtime.float8_emulate=true",
        "batch.tokens_per_step=256",
        "batch.micro_batch=2",
        "batch.grad_accum=2",
        "train.log_every=10",
        "train.eval_every=0",
    )
    losses = [h["loss"] for h in history if "loss" in h]
    assert len(losses) == 5 and all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] - 0.2, losses
    assert losses[-1] < math.log(cfg.model.vocab_size), losses


def test_float8_report_counts_the_converted_linears() -> None:
    from types import SimpleNamespace

    from train.model.float8 import convert_to_float8
    from train.model.gpt import GPT

    model = GPT(ModelConfig())
    rt = SimpleNamespace(float8="tensorwise", float8_emulate=True)
    convert_to_float8(model, recipe="tensorwise", emulate=True)
    assert float8_report(model, rt) == {
        "recipe": "tensorwise",
        "emulated": True,
        "linears_converted": 8,
        "linears_total": 9,
    }
    assert model.lm_head.weight is model.transformer.wte.weight  # still tied, still nn.Linear
    assert type(model.lm_head) is torch.nn.Linear
    assert float8_report(model, SimpleNamespace(float8="none", float8_emulate=False)) is None


def _refusal_lines(module: str, synthetic_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    """Run `python -m <module>` with float8 asked on the CPU without emulation; it must exit 2
    without a traceback. Returns the lines naming the key, on stdout and stderr together (Hydra's
    log handler writes to stdout; the trial's summary line goes there too)."""
    proc = run_cli(
        module,
        [
            "runtime.device=cpu",
            "runtime.dtype=bf16",
            "runtime.float8=tensorwise",
            f"data.dir={synthetic_dir}",
            f"hydra.run.dir={tmp_path}",
            *extra,
        ],
        cwd=tmp_path,
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    return [ln for ln in out.splitlines() if "runtime.float8" in ln]


def test_without_emulate_the_trainer_refuses_in_one_line(synthetic_dir: Path, tmp_path: Path):
    extra = ("train.max_steps=2", f"checkpoint.dir={tmp_path / 'ck'}")
    lines = _refusal_lines("train", synthetic_dir, tmp_path, *extra)
    assert len(lines) == 1 and lines[0].endswith("[train][ERROR] - " + CPU_REFUSAL), lines


def test_without_emulate_the_trial_refuses_in_one_line(synthetic_dir: Path, tmp_path: Path):
    lines = _refusal_lines("train.trial", synthetic_dir, tmp_path)
    # the log's error line, and the summary the trial prints last (the same reason)
    assert lines[0].endswith("[ERROR] - trial failed (invalid_config): " + CPU_REFUSAL), lines
    assert lines[1:] == ["trial FAILED (invalid_config): " + CPU_REFUSAL], lines
    import json

    result = json.loads((tmp_path / "trial.json").read_text())
    assert result["failure"] == {"kind": "invalid_config", "message": CPU_REFUSAL}


# ---- honest MFU ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype,float8,words",
    [
        ("bf16", "none", "bf16 dense peak"),
        ("fp32", "none", "fp32 dense peak"),
        ("bf16", "tensorwise", "bf16-equivalent (float8 tensorwise matmuls"),
        ("bf16", "rowwise", "bf16-equivalent (float8 rowwise matmuls"),
    ],
)
def test_the_mfu_basis_names_float8(dtype: str, float8: str, words: str) -> None:
    from train.core.flops import mfu_basis

    assert mfu_basis(dtype=dtype, float8=float8).startswith(words)


def test_a_float8_trial_is_measured_against_the_bf16_peak() -> None:
    """The same tokens/s gives the same MFU with or without float8: the 6N + 12LHQT FLOPs against
    the bf16 dense peak (989.4 TFLOP/s on an H100 SXM), never the float8 peak (twice as high). At
    the README's 39,210 tokens/s for GPT-2 XL that is the 40.7% it reports."""
    from train.core.flops import flops_per_token, lookup_peak, mfu_basis
    from train.core.result_build import _mfu

    fpt = flops_per_token(n_layer=48, n_head=25, n_embd=1600, seq_len=1024, vocab_size=50304)
    peak = lookup_peak("NVIDIA H100 80GB HBM3", "bf16")
    basis = mfu_basis(dtype="bf16", float8="tensorwise")
    got = _mfu(39_210, fpt, peak=peak, ceiling=None, world=1, basis=basis)
    plain = _mfu(39_210, fpt, peak=peak, ceiling=None, world=1, basis=mfu_basis(dtype="bf16"))
    assert got["spec"] == plain["spec"] == pytest.approx(39_210 * fpt / 989.4e12)
    assert round(got["spec"], 3) == 0.407
    assert got["basis"].startswith("bf16-equivalent")


def test_an_emulated_float8_trial_says_so_in_its_result(make_config, tmp_path: Path) -> None:
    from train.trial.measurement import run_trial
    from train.trial.summary import format_summary

    cfg = make_config("runtime.dtype=bf16", "runtime.float8=rowwise", "runtime.float8_emulate=true")
    out = tmp_path / "trial.json"
    result = run_trial(cfg, out_path=out)
    assert result["status"] == "complete", result["failure"]
    assert result["float8"] == {
        "recipe": "rowwise",
        "emulated": True,
        "linears_converted": 8,
        "linears_total": 9,
    }
    assert result["mfu"]["basis"].startswith("bf16-equivalent (float8 rowwise matmuls")
    assert result["mfu"]["spec"] is None  # a CPU has no spec peak; its ceiling MFU is measured
    assert math.isfinite(result["loss"]["last"])
    assert (
        "  float8     rowwise (emulated): 8 of 9 linears ran float8 matmuls; MFU is "
        "bf16-equivalent" in format_summary(result, out)
    )


F8 = {"recipe": "tensorwise", "emulated": False, "linears_converted": 192, "linears_total": 193}


def test_the_final_table_marks_a_float8_row_and_says_what_its_mfu_is() -> None:
    from sweeper.report.console import _cell, float8_note

    rows = [{"mfu_spec": 0.552, "float8": F8}, {"mfu_spec": 0.481, "float8": None}]
    assert [_cell(r, "mfu_spec") for r in rows] == ["55.2% f8", "48.1%"]
    assert float8_note(rows) == (
        "f8: float8 matmuls ran in rank 1 (tensorwise: 192 of 193 linears); their MFU spec is "
        "bf16-equivalent (the same 6N + 12LHQT FLOPs against the bf16 dense peak, not the "
        "float8 peak)"
    )
    assert float8_note(rows[1:]) is None


def test_best_yaml_records_the_precision_its_runs_ran_in() -> None:
    from sweeper.report.best_yaml import precision_record

    runs = [{"device": {"dtype": "bf16"}, "mfu": {"basis": "bf16-equivalent (float8 ...)"}}]
    assert precision_record(runs, {"float8": F8}) == {
        "dtype": "bf16",
        "float8": F8,
        "mfu_basis": "bf16-equivalent (float8 ...)",
    }
    assert precision_record(runs, {})["float8"] is None


@pytest.mark.parametrize(
    "target,change,key,words",
    [
        ("nanogpt", {"runtime.float8": "tensorwise"}, "runtime.float8", "no float8 training"),
        ("llmc", {"runtime.float8": "rowwise"}, "runtime.float8", "no float8 training"),
        ("nanogpt", {"runtime.attention": "fa3"}, "runtime.attention", "activates no flash"),
        ("llmc", {"runtime.attention": "fa3"}, "runtime.attention", "cuDNN attention"),
    ],
)
def test_the_handoffs_name_what_they_cannot_express(target, change, key, words) -> None:
    from tests.nested import changed
    from tests.train.test_handoff import best_doc
    from train.core.handoff.files import handoff

    lines = handoff(changed(best_doc(), change), target).lines
    named = [ln for ln in lines if ln.startswith(key + "=")]
    assert len(named) == 1 and words in named[0], lines


# ---- explain: the levers of a compute-bound step ------------------------------------------------

XL_RESULT_CHANGES = {
    "config.model": {
        "n_layer": 48,
        "n_head": 25,
        "n_embd": 1600,
        "block_size": 1024,
        "vocab_size": 50304,
    },
    "config.runtime.activation_checkpointing": "every",
    "config.runtime.compile": "default",
}


def _gains(result: dict) -> dict:
    from train.core.diagnosis import diagnose

    d = diagnose(result)
    assert d.verdict == "compute-bound"
    from train.core.diagnosis_text import basis_text, fix_text

    return {fix_text(f): (f.expected_gain, basis_text(f)) for f in d.fixes}


def test_the_compute_bound_verdict_names_the_levers_on_an_h100() -> None:
    from tests.train.test_verdict import make
    from train.core.compute_levers import amdahl

    gains = _gains(make(**XL_RESULT_CHANGES))
    # recompute: every block's forward again, ~1.32x the FLOPs of GPT-2 XL, on 90% of the step
    six_n = 6.0 * (12 * 48 * 1600**2 + 50304 * 1600)
    attn = 12.0 * 48 * 1600 * 1024
    ratio = (six_n + attn + 2 * 12 * 48 * 1600**2 + attn / 3) / (six_n + attn)
    assert ratio == pytest.approx(1.318, abs=1e-3)
    for fix in (
        "runtime.activation_checkpointing=none runtime.loss=chunked",
        "runtime.activation_checkpointing=selective",
    ):
        assert gains[fix][0] == pytest.approx(amdahl(0.9, ratio))
        assert gains[fix][1].startswith("arithmetic: every recomputes 100% of the blocks")
    # float8 tensorwise: public evidence, labelled as such
    gain, basis = gains["runtime.float8=tensorwise"]
    assert gain == 1.17 and basis.startswith("public evidence, not measured here")
    # FA3: attention is 9% of XL's FLOPs, FA3 up to 2x FA2 there
    gain, basis = gains["runtime.attention=fa3"]
    assert gain == pytest.approx(amdahl(0.9 * attn / (six_n + attn), 2.0))
    assert "attention is 9% of the FLOPs" in basis


@pytest.mark.parametrize(
    "changes,absent",
    [
        # an A100 (8.0): no float8 tensor cores, no FA3
        (
            {"device.name": "NVIDIA A100-SXM4-80GB"},
            {"runtime.float8=tensorwise", "runtime.attention=fa3"},
        ),
        # an L4 (8.9): float8 yes, FA3 (Hopper only) no
        ({"device.name": "NVIDIA L4"}, {"runtime.attention=fa3"}),
        # already float8 and FA3; no recompute to drop
        (
            {
                "config.runtime.float8": "tensorwise",
                "config.runtime.attention": "fa3",
                "config.runtime.activation_checkpointing": "none",
            },
            {
                "runtime.float8=tensorwise",
                "runtime.attention=fa3",
                "runtime.activation_checkpointing=selective",
            },
        ),
        # a CPU: none of the GPU levers
        (
            {"device.type": "cpu", "device.name": "AMD EPYC"},
            {"runtime.float8=tensorwise", "runtime.attention=fa3"},
        ),
    ],
)
def test_only_the_levers_that_apply_on_the_device_are_named(changes: dict, absent: set) -> None:
    from tests.train.test_verdict import make

    fixes = set(_gains(make(**{**XL_RESULT_CHANGES, **changes})))
    assert not fixes & absent, fixes
    if changes.get("device.name") == "NVIDIA L4":
        assert "runtime.float8=tensorwise" in fixes


def test_a_float8_trials_verdict_says_its_mfu_is_bf16_equivalent() -> None:
    from tests.train.test_verdict import make
    from train.core.diagnosis import diagnose
    from train.core.diagnosis_text import headline_text

    d = diagnose(make(float8=F8))
    assert "45% MFU (bf16-equivalent: float8 matmuls ran)" in headline_text(d)


def test_bench_float8_runs_and_prints_measured_rows(tmp_path: Path) -> None:
    """scripts/bench/float8.py in its small mode: real trials, one row per variant, PASS."""
    import subprocess
    import sys

    from tests.conftest import PROJECT_DIR

    proc = subprocess.run(
        [sys.executable, "-m", "scripts.bench.float8", "--steps", "3"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| 1 ")]
    assert len(rows) == 3 and sum("8/9 emulated" in r for r in rows) == 2, proc.stdout
    assert "float8 tensorwise / bf16 tokens/s: median" in proc.stdout
    assert proc.stdout.rstrip().endswith("PASS")


def _float8_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= (8, 9)


@pytest.mark.gpu
@pytest.mark.skipif(not _float8_gpu(), reason="needs a CUDA GPU with compute capability >= 8.9")
@pytest.mark.parametrize(
    "model,recipe,converted,total",
    # GPT-2 124M tensorwise: c_attn and mlp.c_fc of each block (the 768-wide outputs are below
    # torchao's thresholds); GPT-2 large rowwise: mlp.c_fc only (5120 x 1280)
    [("gpt2", "tensorwise", 24, 49), ("gpt2-large", "rowwise", 36, 145)],
)
def test_a_real_float8_trial_on_a_gpu(
    make_config, tmp_path: Path, model, recipe, converted, total
) -> None:
    from train.trial.measurement import run_trial

    cfg = make_config(
        f"model={model}",
        "runtime.device=cuda",
        "runtime.dtype=bf16",
        f"runtime.float8={recipe}",
        "batch.tokens_per_step=16384",
        "batch.micro_batch=8",
        "batch.grad_accum=2",
    )
    result = run_trial(cfg, out_path=tmp_path / "trial.json")
    assert result["status"] == "complete", result["failure"]
    assert result["float8"] == {
        "recipe": recipe,
        "emulated": False,
        "linears_converted": converted,
        "linears_total": total,
    }
    assert result["mfu"]["basis"].startswith("bf16-equivalent") and result["mfu"]["spec"] > 0
    assert math.isfinite(result["loss"]["last"])


@pytest.mark.parametrize(
    "device,has_note",
    [("NVIDIA H100 80GB HBM3", True), ("NVIDIA L4", True), ("NVIDIA A100-SXM4-80GB", False)],
)
def test_the_floor_says_where_float8_can_beat_it(device: str, has_note: bool) -> None:
    from tests.train.test_floor import inputs
    from train.explain.floor import floor_report

    r = floor_report(inputs("gpt2-xl", device, "bf16", micro_batch=16, grad_accum=64))
    assert any("float8 tensor cores" in n for n in r.notes) == has_note
