"""The winner handed on: nanoGPT's configurator file and llm.c's command line from best.yaml (tables
over the batch split, world size, precision and compile mode), the round trip, the refusals, the
measured price of each gap, the Young/Daly checkpoint interval, and a real sweep writing both."""

from __future__ import annotations

import itertools
import math
import os
import pickle
import shlex
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
import yaml

from tests.nested import changed
from tests.sweep_helpers import finished_sweep, sweep_dirs
from train.core.evidence import SearchRun
from train.core.handoff import llmc, nanogpt
from train.core.handoff.files import handoff
from train.core.handoff.gaps import GapKind, HandoffRefused, facts_of
from train.core.handoff.gaps_text import WHY, gap_line, why_text
from train.core.handoff.interval import DEFAULT_MTBF_H, checkpoint_plan, plan_line
from train.core.handoff.nanogpt import DataFolder, read_data_folder
from train.export import main as export_main

BLOCK = 1024


def best_doc(
    *, micro_batch=4, grad_accum=2, world=1, dtype="bf16", compile="none", device="cuda"
) -> dict:
    """A best.yaml as a dict: GPT-2 124M (llm.c's d12), every knob at a value both targets run."""
    return {
        "model": {
            "name": "gpt2",
            "n_layer": 12,
            "n_head": 12,
            "n_embd": 768,
            "block_size": BLOCK,
            "vocab_size": 50304,
            "dropout": 0.0,
            "bias": True,
        },
        "data": {
            "dir": "/data/owt",
            "train_file": "train.bin",
            "val_file": "val.bin",
            "format": "llmc",
            "num_workers": 0,
            "prefetch_factor": 2,
            "pin_memory": True,
            "persistent_workers": True,
        },
        "batch": {
            "tokens_per_step": micro_batch * grad_accum * BLOCK * world,
            "micro_batch": micro_batch,
            "grad_accum": grad_accum,
        },
        "optim": {
            "lr": 6e-4,
            "min_lr": 6e-5,
            "warmup_steps": 700,
            "weight_decay": 0.1,
            "beta1": 0.9,
            "beta2": 0.95,
            "grad_clip": 1.0,
            "fused": "auto",
        },
        "checkpoint": {
            "every_steps": 500,
            "dir": "/ckpt/run",
            "mode": "sync",
            "keep": 1,
            "slow_write_s": 0.0,
        },
        "runtime": {
            "device": "auto",
            "dtype": dtype,
            "tf32": True,
            "compile": compile,
            "attention": "auto",
            "activation_checkpointing": "none",
            "threads": 0,
            "seed": 1337,
            "nproc": world,
        },
        "ddp": {
            "bucket_cap_mb": 25.0,
            "gradient_as_bucket_view": False,
            "static_graph": False,
            "timeout_s": 300.0,
        },
        "train": {
            "max_steps": 5000,
            "log_every": 10,
            "eval_every": 500,
            "eval_batches": 8,
            "resume": "auto",
        },
        "provenance": {
            "fingerprint": {"device": device, "device_name": "NVIDIA H100"},
            "metrics": {"tokens_per_s": 1.0e5},
            "sweep": {"study": "s", "trial": 3},
        },
    }


def read_configurator(text: str) -> dict:
    """nanoGPT's configurator semantics: the file exec'd over a namespace of assignments."""
    names: dict = {}
    exec(compile(text, "best_nanogpt.py", "exec"), {}, names)  # our file, as configurator.py does
    return names


def nanogpt_vocab(text: str) -> int:
    """The vocabulary nanoGPT's train.py builds for a configurator file, as its lines 115-155 do
    (karpathy/nanoGPT train.py): data_dir = os.path.join('data', dataset), then meta.pkl's
    vocab_size where that file exists, else 50304."""
    data_dir = os.path.join("data", read_configurator(text)["dataset"])
    meta_path = os.path.join(data_dir, "meta.pkl")
    if os.path.exists(meta_path):
        with open(meta_path, "rb") as f:
            return pickle.load(f)["vocab_size"]  # our own test file, as train.py reads it
    return 50304


def llmc_args(text: str) -> dict[str, str]:
    """The train_gpt2cu flags of a best_llmc.sh, as {flag: value}."""
    command = [line for line in text.splitlines() if not line.startswith(("#", "set "))]
    words = shlex.split(" ".join(line.rstrip("\\") for line in command))
    start = words.index("./train_gpt2cu") + 1
    return dict(zip(words[start::2], words[start + 1 :: 2], strict=True))


ROWS = list(
    itertools.product(
        (1, 4), (1, 8), (1, 8), ("fp32", "bf16", "fp16"), ("none", "default", "max-autotune")
    )
)


@pytest.mark.parametrize(("micro_batch", "grad_accum", "world", "dtype", "compile"), ROWS)
def test_the_batch_survives_every_split_world_precision_and_compile(
    micro_batch, grad_accum, world, dtype, compile
) -> None:
    doc = best_doc(
        micro_batch=micro_batch, grad_accum=grad_accum, world=world, dtype=dtype, compile=compile
    )
    made = handoff(doc, "nanogpt")
    got = read_configurator(made.text)
    # nanoGPT's gradient_accumulation_steps is global: train.py divides it by the world size
    assert got["gradient_accumulation_steps"] == grad_accum * world
    assert (
        got["batch_size"] * got["gradient_accumulation_steps"] * got["block_size"]
        == doc["batch"]["tokens_per_step"]
    )
    assert got["dtype"] == {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype]
    assert got["compile"] is (compile != "none")
    assert f"assumes world size {world}" in made.text
    run = "torchrun --standalone --nproc_per_node=8" if world == 8 else "python"
    assert f"# Run (in nanoGPT's folder): {run} train.py best_nanogpt.py" in made.text
    # what nanoGPT cannot express: only a compile mode other than its default
    assert [line.split("=")[0] for line in made.lines] == (
        ["runtime.compile"] if compile == "max-autotune" else []
    )

    made = handoff(doc, "llmc")
    flags = llmc_args(made.text)
    assert int(flags["-d"]) == doc["batch"]["tokens_per_step"]
    assert int(flags["-b"]) * int(flags["-t"]) * world * grad_accum == int(flags["-d"])
    assert flags["-e"] == "d12" and ("mpirun -np 8" in made.text) == (world == 8)
    # llm.c has no torch.compile at all (nor DDP's knobs under several processes)
    keys = {line.split("=")[0] for line in made.lines}
    assert ("runtime.compile" in keys) == (compile != "none")
    ddp = {"ddp.bucket_cap_mb", "ddp.gradient_as_bucket_view", "ddp.static_graph"}
    assert keys - {"runtime.compile"} == (ddp if world == 8 else set())


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"runtime.activation_checkpointing": "every"}, "runtime.activation_checkpointing"),
        ({"runtime.attention": "flash"}, "runtime.attention"),
        ({"runtime.tf32": False}, "runtime.tf32"),
        ({"data.num_workers": 2}, "data.num_workers"),
        ({"data.pin_memory": False}, "data.pin_memory"),
        ({"checkpoint.mode": "async"}, "checkpoint.mode"),
        ({"checkpoint.keep": 3}, "checkpoint.keep"),
        ({"runtime.seed": 7}, "runtime.seed"),
        ({"train.eval_every": 100}, "train.eval_every"),
        ({"checkpoint.every_steps": 0}, "checkpoint.every_steps"),
    ],
)
def test_each_knob_nanogpt_has_no_setting_for_is_named(change, key) -> None:
    doc = changed(best_doc(), change)
    assert [line.split("=")[0] for line in handoff(doc, "nanogpt").lines] == [key]


@pytest.mark.parametrize(
    ("target", "change", "match"),
    [
        (
            "nanogpt",
            {"runtime.dtype": "bf16", "provenance.fingerprint.device": "cpu"},
            "runtime.dtype resolves to bf16 on a CPU",
        ),
        (
            "nanogpt",
            {
                "runtime.nproc": 2,
                "provenance.fingerprint.device": "cpu",
                "runtime.dtype": "fp32",
                "batch.tokens_per_step": 16384,
            },
            "runtime.nproc is 2 processes on a CPU",
        ),
        ("nanogpt", {"batch.tokens_per_step": 9999}, "batch.tokens_per_step 9999 is not"),
        ("llmc", {"model.n_layer": 2}, "model.n_layer 2 .* not a GPT-2 shape"),
        ("llmc", {"model.vocab_size": 4096}, "model.vocab_size 4096"),
        ("llmc", {"model.block_size": 2048, "batch.tokens_per_step": 16384}, "model.block_size"),
        ("llmc", {"optim.beta2": 0.99}, "optim.beta2 is 0.99, and train_gpt2cu hard-codes 0.95"),
        ("llmc", {"model.bias": False}, "model.bias"),
    ],
)
def test_a_value_that_would_change_the_science_is_refused_naming_the_key(
    target, change, match
) -> None:
    doc = changed(best_doc(), change)
    module = {"nanogpt": nanogpt, "llmc": llmc}[target]
    with pytest.raises(HandoffRefused, match=match):
        module.check(doc)
    made = handoff(doc, target)  # the sweep's file: it refuses to run, saying why
    assert made.refused is not None
    assert ("raise SystemExit(" if target == "nanogpt" else "exit 2") in made.text


def small_vocab_doc(data_dir: Path) -> dict:
    doc = changed(best_doc(), {"model.vocab_size": 4096, "data.dir": str(data_dir)})
    return doc


def test_a_data_folder_without_meta_pkl_is_named_with_the_file_to_write(tmp_path) -> None:
    folder = tmp_path / "tokens"
    folder.mkdir()
    doc = small_vocab_doc(folder)
    made = handoff(doc, "nanogpt", folder=read_data_folder(folder))
    (line,) = [line for line in made.lines if line.startswith("model.vocab_size")]
    assert "holds no meta.pkl, so train.py builds a 50,304-token model" in line
    assert "What nanoGPT cannot express" in made.text and nanogpt_vocab(made.text) == 50304
    # the command the line names writes the meta.pkl nanoGPT reads, and then the model matches
    command = line.split("write one before running: ")[1]
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)
    assert nanogpt_vocab(made.text) == 4096
    again = handoff(doc, "nanogpt", folder=read_data_folder(folder))
    assert not [line for line in again.lines if line.startswith("model.vocab_size")]
    assert "train.py takes it from" in again.text and "does not open" in again.text


@pytest.mark.parametrize(
    ("vocab", "folder", "note", "gap"),
    [
        (4096, None, "which must hold {'vocab_size': 4096}", None),
        (50304, None, "train.py builds it where", None),
        (4096, DataFolder(has_meta_pkl=False), None, "builds a 50,304-token model"),
        (50304, DataFolder(has_meta_pkl=False), None, None),
        (4096, DataFolder(has_meta_pkl=True), "does not open", None),
        (4096, DataFolder(has_meta_pkl=True, meta_vocab=4096), "({'vocab_size': 4096})", None),
        (50304, DataFolder(has_meta_pkl=True, meta_vocab=4096), None, "builds a 4,096-token"),
    ],
)
def test_what_the_export_says_of_the_vocabulary(vocab, folder, note, gap) -> None:
    doc = changed(best_doc(), {"model.vocab_size": vocab})
    made = handoff(doc, "nanogpt", folder=folder)
    notes = [line for line in made.text.splitlines() if line.startswith("# vocab_size")]
    gaps = [line for line in made.lines if line.startswith("model.vocab_size")]
    assert note in notes[0] if note else notes == [], notes
    assert gap in gaps[0] if gap else gaps == [], gaps


def test_the_generated_data_folder_gives_nanogpt_the_swept_vocabulary(tmp_path) -> None:
    from train.data.synthetic import GENERATOR, generate

    assert GENERATOR.startswith("train.data.synthetic.")  # what read_data_folder trusts
    generate(tmp_path / "synthetic", num_tokens=5000)
    folder = read_data_folder(tmp_path / "synthetic")
    assert folder == DataFolder(has_meta_pkl=True, meta_vocab=4096)
    made = handoff(small_vocab_doc(tmp_path / "synthetic"), "nanogpt", folder=folder)
    assert nanogpt_vocab(made.text) == 4096
    assert not [line for line in made.lines if line.startswith("model.vocab_size")]


def test_the_tool_never_reads_a_pickle() -> None:
    """A data folder may come from someone else: its meta.pkl is written, never loaded."""
    root = Path(__file__).resolve().parents[2]
    readers = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("train", "sweeper", "hydra_plugins", "scripts")
        for path in (root / folder).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "pickle.load" in line or "Unpickler" in line
    ]
    assert readers == []


def test_round_trip_through_the_cli_gives_the_same_batch_precision_and_model(tmp_path) -> None:
    doc = best_doc(micro_batch=8, grad_accum=4, world=8, dtype="bf16", compile="default")
    doc["pinned_sections"] = [*[s for s in doc if s != "provenance"], "provenance"]
    best = tmp_path / "best.yaml"
    best.write_text(yaml.safe_dump(doc))
    assert export_main(["--to", "nanogpt", str(best)]) == 0
    got = read_configurator((tmp_path / "best_nanogpt.py").read_text())
    world = facts_of(doc).world
    tokens = got["batch_size"] * got["gradient_accumulation_steps"] * got["block_size"]
    assert tokens == doc["batch"]["tokens_per_step"]
    assert got["batch_size"] == doc["batch"]["micro_batch"]
    assert got["gradient_accumulation_steps"] // world == doc["batch"]["grad_accum"]
    assert got["dtype"] == "bfloat16" and got["compile"] is True
    for key in ("n_layer", "n_head", "n_embd", "block_size", "dropout", "bias"):
        assert got[key] == doc["model"][key], key
    assert (got["learning_rate"], got["min_lr"], got["warmup_iters"]) == (6e-4, 6e-5, 700)
    assert (got["eval_interval"], got["always_save_checkpoint"]) == (500, True)
    assert export_main(["--to", "llmc", str(best)]) == 0
    assert llmc_args((tmp_path / "best_llmc.sh").read_text())["-d"] == str(8 * 4 * BLOCK * 8)

    broken = tmp_path / "cut.yaml"  # the existing reader's one-line refusal, exit 2
    broken.write_text("model: [unclosed\n")
    assert export_main(["--to", "nanogpt", str(broken)]) == 2


def test_a_gap_is_priced_by_the_trial_that_ran_the_winners_other_knobs() -> None:
    doc = best_doc(compile="max-autotune")
    trials = [
        SearchRun(
            state="complete",
            number=3,
            params={"runtime.compile": "max-autotune", "batch.micro_batch": 4, "optim.lr": 3e-4},
            tokens_per_s=120_000.0,
        ),
        SearchRun(
            state="complete",
            number=5,
            params={"runtime.compile": "default", "batch.micro_batch": 4, "optim.lr": 5e-4},
            tokens_per_s=100_000.0,
        ),
        SearchRun(
            state="complete",
            number=6,
            params={"runtime.compile": "default", "batch.micro_batch": 8, "optim.lr": 3e-4},
            tokens_per_s=130_000.0,
        ),
    ]
    (line,) = handoff(doc, "nanogpt", trials=trials).lines
    assert line.endswith(
        "measured: the winner ran 1.20x the tokens/s of trial 5 "
        "(runtime.compile=default: 100,000 vs 120,000 tokens/s)"
    )
    (line,) = handoff(doc, "nanogpt", trials=trials[:1]).lines
    assert "not measured (no trial ran runtime.compile=default" in line
    (line,) = handoff(doc, "nanogpt", trials=None, reachable="the study's database is gone").lines
    assert line.endswith("not measured (the study's database is gone)")


def test_a_gap_is_data_and_gaps_text_writes_its_line() -> None:
    doc = changed(
        best_doc(compile="max-autotune"),
        {"runtime.compile_unit": "block", "runtime.seed": 7, "data.num_workers": 2},
    )
    winner = SearchRun(
        state="complete",
        number=3,
        params={"runtime.compile": "max-autotune"},
        tokens_per_s=120_000.0,
    )
    twin = SearchRun(
        state="complete", number=5, params={"runtime.compile": "default"}, tokens_per_s=100_000.0
    )
    made = handoff(doc, "nanogpt", trials=[winner, twin])
    kinds = {g.key: (g.kind, g.worth.kind) for g in made.gaps}
    assert kinds == {
        "runtime.compile": ("compile_default_mode", "measured"),
        "runtime.compile_unit": ("compile_whole_model", "not_searched"),
        "runtime.seed": ("fixed_seed", "not_searched"),
        "data.num_workers": ("in_process_data", "not_searched"),
    }
    assert made.gaps[0].worth.twin == twin and made.gaps[0].worth.winner_tokens_per_s == 120_000.0
    assert made.lines == [gap_line(g) for g in made.gaps]
    assert made.lines[2] == (
        "runtime.seed=7: nanoGPT seeds 1337 + rank; "
        "not measured (the sweep did not search runtime.seed)"
    )
    (compiled,) = [g for g in handoff(doc, "llmc").gaps if g.key == "runtime.compile"]
    assert compiled.kind == "no_torch_compile" and compiled.numbers == {"compile_unit": "block"}
    assert why_text(compiled) == (
        "llm.c has no torch.compile (whole or block by block): its own CUDA kernels run"
    )


def test_every_gap_kind_has_a_sentence() -> None:
    said = {kind for sentences in WHY.values() for kind in sentences}
    assert said == set(get_args(GapKind))


def test_a_winner_llmc_cannot_train_names_the_best_measured_config_it_can() -> None:
    doc = changed(best_doc(), {"model.n_layer": 2, "model.n_embd": 64, "model.n_head": 2})
    trials = [
        SearchRun(state="complete", number=3, params={"model.n_layer": 2}, tokens_per_s=9e5),
        SearchRun(
            state="complete",
            number=4,
            params={"model.n_layer": 12, "model.n_embd": 768, "model.n_head": 12},
            tokens_per_s=1e5,
        ),
    ]
    made = handoff(doc, "llmc", trials=trials)
    assert made.lines[1].startswith("best measured config it can express: trial 4, 100,000")
    assert (
        handoff(doc, "llmc", trials=trials[:1])
        .lines[1]
        .endswith("none (no trial of the study fits it)")
    )


H = 3600.0


# each row changes the plan's inputs from these: a 10 s save, 1 s steps, 50,000 h MTBF, one process
# (and no cap of the user's, no run length: checkpoint_plan's defaults)
PLAN_INPUTS = {"save_s": 10.0, "step_s": 1.0, "mtbf_h": 50_000, "world": 1}


@pytest.mark.parametrize(
    ("change", "steps", "rule"),
    [
        ({}, 60_000, "young-daly"),  # sqrt(2 x 10 x 1.8e8) = 60,000 s
        ({"step_s": 2.0}, 30_000, "young-daly"),
        ({"world": 8}, 21_213, "young-daly"),  # the job fails 8x as often
        ({"planned_every": 1_000}, 1_000, "planned_checkpoint_every"),  # the user's cap
        ({"planned_every": 100_000}, 60_000, "young-daly"),  # a cap above is no bound
        ({"planned_steps": 5_000}, 5_000, "run length"),
        ({"save_s": 0.0}, 1, "young-daly"),  # a free save: every step, at least 1
        # sqrt(2 x 0.5 x 3600) = 60 s < one step
        ({"save_s": 0.5, "step_s": 100.0, "mtbf_h": 1}, 1, "young-daly"),
        ({"save_s": 0.05, "step_s": 0.1}, 42_426, "young-daly"),  # a CPU step: 4,243 s of work
    ],
)
def test_the_checkpoint_interval_rule(change, steps, rule) -> None:
    given = {**PLAN_INPUTS, **change}
    plan = checkpoint_plan(**given)
    save_s, step_s = given["save_s"], given["step_s"]
    assert (plan.every_steps, plan.rule) == (steps, rule)
    assert plan.optimum_s == pytest.approx(
        math.sqrt(2 * save_s * given["mtbf_h"] / given["world"] * H)
    )
    assert plan.overhead_frac == pytest.approx(save_s / (steps * step_s))
    assert plan.lost_per_failure_s == pytest.approx(steps * step_s / 2)


def test_the_interval_line_and_bad_inputs() -> None:
    plan = checkpoint_plan(save_s=10.0, step_s=1.0, mtbf_h=DEFAULT_MTBF_H)
    assert plan_line(plan) == (
        "checkpoint every 60,000 steps (16.7 h; Young/Daly: sqrt(2 x 10 s save x 50,000 h MTBF) "
        "= 16.7 h): saving costs 0.017% of the run, a failure loses 8.3 h of work on average"
    )
    with pytest.raises(ValueError, match="mtbf_h must be > 0"):
        checkpoint_plan(save_s=1.0, step_s=1.0, mtbf_h=0)
    with pytest.raises(ValueError, match="step_s must be > 0"):
        checkpoint_plan(save_s=1.0, step_s=0.0)


def test_a_smoke_sweep_pins_the_measured_interval_and_writes_both_handoffs(tmp_path) -> None:
    proc, _ = finished_sweep(
        tmp_path, "handoff", "search=smoke", "hydra.sweeper.n_trials=2", "checkpoint.every_steps=2"
    )
    (sweep_dir,) = sweep_dirs(tmp_path)
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    plan = best["provenance"]["checkpoint"]
    assert plan["rule"] == "young-daly" and plan["save_s"] > 0
    assert best["checkpoint"]["every_steps"] == plan["every_steps"] > 2  # not the trial's 2
    assert plan["lost_per_failure_s"] == pytest.approx(plan["interval_s"] / 2)
    winner_cost = best["provenance"]["cost"]["winner"]
    assert winner_cost["num_saves"] == winner_cost["planned_steps"] // plan["every_steps"]
    assert f"checkpoint every {plan['every_steps']:,} steps" in proc.stdout
    nano = (sweep_dir / "best_nanogpt.py").read_text()
    assert read_configurator(nano)["eval_interval"] == plan["every_steps"]
    # the generated data folder holds the meta.pkl nanoGPT sizes its model from
    assert nanogpt_vocab(nano) == best["model"]["vocab_size"] == 4096
    assert "best_nanogpt.py: what nanoGPT cannot express" in proc.stdout
    assert "best_llmc.sh: refuses to run: llm.c export refused: model.n_layer 2" in proc.stdout
    run = subprocess.run(
        ["bash", str(sweep_dir / "best_llmc.sh")], capture_output=True, text=True, check=False
    )
    assert run.returncode == 2 and "model.n_layer" in run.stderr
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "train.export",
            "--to",
            "nanogpt",
            str(sweep_dir / "best.yaml"),
            "--out",
            str(tmp_path / "again"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "best_nanogpt.py").read_text() == nano  # the CLI's is the same
