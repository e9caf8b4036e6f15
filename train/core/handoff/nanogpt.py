"""best.yaml as a nanoGPT configurator file (`python train.py best_nanogpt.py`).

nanoGPT's train.py (karpathy/nanoGPT) declares its settings as module globals and `exec`s the file
named on its command line over them (configurator.py), so the file is plain `name = value` lines.
The names and their meaning are train.py's:

- `gradient_accumulation_steps` is the GLOBAL figure: under torchrun, train.py asserts it divides
  by the world size and divides it (`gradient_accumulation_steps //= ddp_world_size`); this
  project's `batch.grad_accum` is per process. So the file holds grad_accum x world.
- tokens per step = gradient_accumulation_steps x batch_size x block_size (train.py's
  `tokens_per_iter` once divided back), which must equal `batch.tokens_per_step`.
- `dtype` is 'float32' | 'bfloat16' | 'float16', applied through autocast on CUDA only: on a CPU
  train.py uses no autocast, so a CPU run is float32 whatever `dtype` says.
- `compile = True` is torch.compile's default mode, of the whole model (`model =
  torch.compile(model)`: no compile block by block, runtime.compile_unit=block); TF32 is always
  on; batches are read in the training process (`get_batch`, pinned on CUDA); DDP is one rank per
  GPU (`cuda:<local_rank>`) with default bucket settings; checkpoints are `torch.save` at
  `eval_interval` (every one when `always_save_checkpoint`), one `ckpt.pt` overwritten; the seed
  is 1337 + rank.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from train.core.handoff.gaps import Facts, Gap, GapKind, HandoffRefused, check_tokens, facts_of
from train.core.handoff.gaps_text import comment_lines, file_lines
from train.core.rules import FLASH_IMPLS

TARGET = "nanoGPT"
FILE_NAME = "best_nanogpt.py"
DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # train.py's ptdtype keys
NANOGPT_SEED = 1337  # train.py: torch.manual_seed(1337 + seed_offset)
DDP_DEFAULTS = {"bucket_cap_mb": 25.0, "gradient_as_bucket_view": False, "static_graph": False}
NANOGPT_VOCAB = 50304  # train.py's vocab_size where the data folder has no meta.pkl
META_PKL = "meta.pkl"  # train.py unpickles os.path.join(data_dir, 'meta.pkl') where it exists
# train/data/synthetic.py's GENERATOR, whose meta.json is written with the meta.pkl beside it (not
# imported: train.data loads torch)
OUR_GENERATOR_PREFIX = "train.data.synthetic."
# records one gap: gap(key, the values nanoGPT runs instead, what it does instead)
_GapSink = Callable[[str, tuple, GapKind], None]


@dataclass(frozen=True, kw_only=True)
class DataFolder:
    """What nanoGPT's train.py will find in best.yaml's data folder, looked at by the caller."""

    has_meta_pkl: bool  # train.py sizes its model from meta.pkl's vocab_size, 50304 without one
    meta_vocab: int | None = None  # meta.pkl's vocab_size, known where this project wrote it


def read_data_folder(path: str | Path) -> DataFolder | None:
    """The data folder as train.py will see it, or None where it is not on this machine. The
    pickle is never opened: its vocab_size is known only from a meta.json this project wrote
    beside it (scripts/prepare_data.py, train/data/synthetic.py)."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return None
    if not (folder / META_PKL).is_file():
        return DataFolder(has_meta_pkl=False)
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return DataFolder(has_meta_pkl=True)
    ours = isinstance(meta, dict) and str(meta.get("generator", "")).startswith(
        OUR_GENERATOR_PREFIX
    )
    vocab = meta.get("vocab_size") if ours else None
    return DataFolder(has_meta_pkl=True, meta_vocab=vocab if isinstance(vocab, int) else None)


def check(doc: Mapping[str, Any]) -> Facts:
    """The winner's facts, once nanoGPT can train it at all with the same science."""
    facts = facts_of(doc)
    if facts.device_type == "cpu" and facts.dtype != "fp32":
        raise HandoffRefused(
            TARGET,
            "runtime.dtype",
            (
                f"resolves to {facts.dtype} on a CPU, and nanoGPT's train.py runs a CPU in float32 "
                f"(no autocast on device 'cpu'): a different precision"
            ),
        )
    if facts.device_type == "cpu" and facts.world > 1:
        raise HandoffRefused(
            TARGET,
            "runtime.nproc",
            (
                f"is {facts.world} processes on a CPU, and nanoGPT's DDP puts each rank on "
                f"cuda:<local_rank>"
            ),
        )
    check_tokens(doc, target=TARGET, world=facts.world)
    return facts


def gaps(doc: Mapping[str, Any], facts: Facts) -> list[Gap]:
    """Every knob of the winner nanoGPT has no setting for, and what it runs instead."""
    out = []

    def gap(key: str, instead: tuple, kind: GapKind) -> None:
        section, name = key.split(".")
        value = doc[section][name]
        out.append(Gap(target=TARGET, key=key, value=value, instead=instead, kind=kind))

    _runtime_gaps(doc["runtime"], facts, gap)
    _loop_gaps(doc, facts, gap)
    return out


def _runtime_gaps(rt: Mapping[str, Any], facts: Facts, gap: _GapSink) -> None:
    """The runtime knobs nanoGPT has no setting for: compile, memory levers, attention kernel,
    float8, TF32 and the seed."""
    if rt["compile"] not in ("none", "default"):
        gap("runtime.compile", ("default",), "compile_default_mode")
    if rt["compile"] != "none" and rt.get("compile_unit", "model") != "model":
        gap("runtime.compile_unit", ("model",), "compile_whole_model")
    if rt["activation_checkpointing"] != "none":
        gap("runtime.activation_checkpointing", ("none",), "keeps_activations")
    if rt.get("loss", "full") != "full":
        gap("runtime.loss", ("full",), "full_logits")
    if rt["attention"] in FLASH_IMPLS:
        gap("runtime.attention", ("auto",), "no_flash_impl")
    elif rt["attention"] != "auto":
        gap("runtime.attention", ("auto",), "sdpa_picks")
    if rt.get("float8", "none") != "none":
        gap("runtime.float8", ("none",), "bf16_matmuls")
    if facts.device_type == "cuda" and not rt["tf32"]:
        gap("runtime.tf32", (True,), "tf32_on")
    if rt["seed"] != NANOGPT_SEED:
        gap("runtime.seed", (NANOGPT_SEED,), "fixed_seed")


def _loop_gaps(doc: Mapping[str, Any], facts: Facts, gap: _GapSink) -> None:
    """The knobs around the step nanoGPT has no setting for: data loading, checkpointing, the
    optimizer, DDP and the eval interval."""
    data, ckpt, cuda = doc["data"], doc["checkpoint"], facts.device_type == "cuda"
    if int(data["num_workers"]) > 0:
        gap("data.num_workers", (0,), "in_process_data")
    if cuda and not data["pin_memory"]:
        gap("data.pin_memory", (True,), "pinned_batches")
    if ckpt["mode"] != "sync":
        gap("checkpoint.mode", ("sync",), "sync_save")
    if int(ckpt["keep"]) != 1:
        gap("checkpoint.keep", (1,), "one_checkpoint")
    if cuda and str(doc["optim"]["fused"]).lower() == "false":
        gap("optim.fused", ("auto", "true"), "fused_adamw")
    if facts.world > 1:
        for name, default in DDP_DEFAULTS.items():
            if doc["ddp"][name] != default:
                gap(f"ddp.{name}", (default,), "ddp_default")
    every, evals = int(ckpt["every_steps"]), int(doc["train"]["eval_every"])
    if every == 0:
        gap("checkpoint.every_steps", (), "saves_on_improvement")
    elif evals != every:
        gap("train.eval_every", (every,), "eval_at_save")


def nanogpt_file(
    doc: Mapping[str, Any], *, notes: list[str], lines: list[str], data: Sequence[str] = ()
) -> str:
    """The configurator file: `notes` (comment lines) on top, then `name = value` lines. `lines`
    are the cannot-express lines (gaps priced, best expressible config); `data` more notes on the
    data folder (`vocab_lines`)."""
    facts = check(doc)
    m, b, o, t, rt = doc["model"], doc["batch"], doc["optim"], doc["train"], doc["runtime"]
    every, evals = int(doc["checkpoint"]["every_steps"]), int(t["eval_every"])
    settings: dict[str, Any] = {
        "out_dir": str(doc["checkpoint"]["dir"]),
        "eval_interval": every or evals or int(t["max_steps"]) + 1,
        "eval_iters": int(t["eval_batches"]),
        "log_interval": int(t["log_every"]),
        "always_save_checkpoint": every > 0,
        "init_from": "scratch",
        "wandb_log": False,
        # train.py reads os.path.join('data', dataset): an absolute folder is taken as it is
        "dataset": str(doc["data"]["dir"]),
        "gradient_accumulation_steps": int(b["grad_accum"]) * facts.world,  # global
        "batch_size": int(b["micro_batch"]),
        **{name: int(m[name]) for name in ("block_size", "n_layer", "n_head", "n_embd")},
        "dropout": float(m["dropout"]),
        "bias": bool(m["bias"]),
        "learning_rate": float(o["lr"]),
        "max_iters": int(t["max_steps"]),
        **{name: float(o[name]) for name in ("weight_decay", "beta1", "beta2", "grad_clip")},
        "decay_lr": True,
        "warmup_iters": int(o["warmup_steps"]),
        "lr_decay_iters": int(t["max_steps"]),
        "min_lr": float(o["min_lr"]),
        "device": "cuda" if facts.device_type == "cuda" else "cpu",
        "dtype": DTYPE_NAMES[facts.dtype],
        "compile": rt["compile"] != "none",
    }
    if facts.world > 1:
        settings["backend"] = "nccl"
    head = [*notes, *command_notes(doc, facts), *data_notes(doc), *data]
    head += file_lines(TARGET, lines)
    body = [f"{name} = {val!r}" for name, val in settings.items()]
    return comment_lines(head) + "\n".join(body) + "\n"


def command_notes(doc: Mapping[str, Any], facts: Facts) -> list[str]:
    """The exact command, and the batch arithmetic it relies on."""
    b, block = doc["batch"], int(doc["model"]["block_size"])
    threads = int(doc["runtime"]["threads"])
    env = f"OMP_NUM_THREADS={threads} " if threads else ""  # runtime.threads: torch's intra-op
    if facts.world > 1:
        run = f"{env}torchrun --standalone --nproc_per_node={facts.world} train.py {FILE_NAME}"
    else:
        run = f"{env}python train.py {FILE_NAME}"
    ga = int(b["grad_accum"]) * facts.world
    return [
        f"Run (in nanoGPT's folder): {run}",
        f"gradient_accumulation_steps is GLOBAL and assumes world size {facts.world}: train.py "
        f"divides it by the world size, giving {b['grad_accum']} per process (best.yaml's "
        f"batch.grad_accum)",
        f"tokens per step: {ga} x {b['micro_batch']} x {block} = {int(b['tokens_per_step']):,} "
        f"(gradient_accumulation_steps x batch_size x block_size = batch.tokens_per_step)",
    ]


def data_notes(doc: Mapping[str, Any]) -> list[str]:
    """What nanoGPT reads from the data folder for the tokens."""
    data = doc["data"]
    return [
        f"data: train.py reads {data['dir']}/train.bin and val.bin as headerless uint16 "
        f"(best.yaml: {data['train_file']}, {data['val_file']}, format {data['format']}); "
        f"it samples random windows, not this project's seeded order"
    ]


def vocab_lines(doc: Mapping[str, Any], folder: DataFolder | None) -> tuple[list[str], list[str]]:
    """(notes, cannot-express lines) for the vocabulary: train.py builds meta.pkl's vocab_size,
    or 50304 where the data folder has no meta.pkl, whatever the configurator file says.
    `folder` None: the folder was not looked at (it is not on this machine)."""
    vocab, where = int(doc["model"]["vocab_size"]), str(doc["data"]["dir"])
    pkl = f"{where.rstrip('/')}/{META_PKL}"
    write = (
        f"python -c \"import pickle, sys; pickle.dump({{'vocab_size': {vocab}}}, "
        f"open(sys.argv[1], 'wb'))\" {shlex.quote(pkl)}"
    )
    held = f"{{'vocab_size': {vocab}}}"
    if folder is None:
        if vocab == NANOGPT_VOCAB:
            return [
                f"vocab_size {vocab}: train.py builds it where {where} has no {META_PKL} "
                f"(one there sets the vocabulary)"
            ], []
        return [
            f"vocab_size {vocab}: train.py takes it from {pkl}, which must hold {held} "
            f"(without one it builds {NANOGPT_VOCAB}); the folder is not on this machine to "
            f"check; to write one: {write}"
        ], []
    if not folder.has_meta_pkl:
        if vocab == NANOGPT_VOCAB:
            return [], []
        return [], [
            f"model.vocab_size={vocab}: {where} holds no {META_PKL}, so train.py builds a "
            f"{NANOGPT_VOCAB:,}-token model (a larger lm_head: a different model and "
            f"speed); write one before running: {write}"
        ]
    if folder.meta_vocab is None:
        return [
            f"vocab_size {vocab}: train.py takes it from {pkl} (a pickle, which this tool "
            f"does not open): it must hold {held}, else: {write}"
        ], []
    if folder.meta_vocab == vocab:
        return [f"vocab_size {vocab}: train.py takes it from {pkl} ({held})"], []
    return [], [
        f"model.vocab_size={vocab}: {pkl} says {folder.meta_vocab:,}, so train.py builds a "
        f"{folder.meta_vocab:,}-token model, not the one the sweep measured; for "
        f"best.yaml's model rewrite it: {write}"
    ]


def refusal_file(refused: HandoffRefused, *, notes: list[str], lines: list[str]) -> str:
    """A configurator file that stops train.py with the reason (configurator.py execs it)."""
    head = [*notes, str(refused), *lines]
    return comment_lines(head) + f"raise SystemExit({f'{FILE_NAME}: {refused}'!r})\n"
