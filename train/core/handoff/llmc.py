"""best.yaml as an llm.c command line (`train_gpt2cu`, karpathy/llm.c train_gpt2.cu).

llm.c trains the GPT-2 family only: `-e dN` builds a fresh model of depth N in {6, 12, 24, 36, 48}
(channels 384/768/1024/1280/1600, heads 6/12/16/20/25), 1024 positions, vocab 50257 padded to
50304, biases, no dropout. It hard-codes AdamW's betas (0.9, 0.95), eps 1e-8 and the grad-norm
clip (1.0); the precision is a build flag (`make train_gpt2cu PRECISION=BF16|FP32|FP16`). Its
flags: -b micro-batch per GPU, -t sequence length, -d total batch tokens (grad accumulation is
derived: d / (b x t x processes)), -x steps, -l lr, -u warmup, -q final lr fraction, -k schedule,
-c weight decay, -n checkpoint every, -nk keep, -o output dir, -y resume, -v/-m validation, -f
TF32, -r recompute (0 none, 1 GELU, 2 GELU+LayerNorm), -z ZeRO stage, -i/-j data shards. Several
GPUs: `mpirun -np N`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from train.core.handoff.gaps import Facts, Gap, GapKind, HandoffRefused, check_tokens, facts_of
from train.core.handoff.gaps_text import comment_lines, file_lines

TARGET = "llm.c"
FILE_NAME = "best_llmc.sh"
DEPTHS = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}
MAX_SEQ_LEN = 1024
VOCABS = (50257, 50304)  # GPT-2's, and padded to a multiple of 128 as llm.c pads it
FIXED = {"optim.beta1": 0.9, "optim.beta2": 0.95, "optim.grad_clip": 1.0}  # train_gpt2.cu
PRECISION = {"bf16": "BF16", "fp32": "FP32", "fp16": "FP16"}


def check(doc: Mapping[str, Any]) -> Facts:
    """The winner's facts, once llm.c can train it with the same model, batch and optimizer."""
    m, facts = doc["model"], facts_of(doc)
    shape = DEPTHS.get(int(m["n_layer"]))
    if shape != (int(m["n_embd"]), int(m["n_head"])):
        raise HandoffRefused(
            TARGET,
            "model.n_layer",
            (
                f"{m['n_layer']} (n_embd {m['n_embd']}, n_head {m['n_head']}) is not a GPT-2 shape "
                f"llm.c builds (-e d6/d12/d24/d36/d48: n_embd 384/768/1024/1280/1600)"
            ),
        )
    if int(m["vocab_size"]) not in VOCABS:
        raise HandoffRefused(
            TARGET,
            "model.vocab_size",
            (
                f"{m['vocab_size']} is not GPT-2's 50257 (padded 50304), the only vocabulary llm.c "
                f"builds"
            ),
        )
    if int(m["block_size"]) > MAX_SEQ_LEN:
        raise HandoffRefused(
            TARGET,
            "model.block_size",
            f"{m['block_size']} is more than the {MAX_SEQ_LEN} positions llm.c's models hold",
        )
    if not m["bias"] or float(m["dropout"]) != 0.0:
        key = "model.bias" if not m["bias"] else "model.dropout"
        raise HandoffRefused(TARGET, key, "differs from llm.c's GPT-2 (biases on, no dropout)")
    for key, fixed in FIXED.items():
        section, name = key.split(".")
        if float(doc[section][name]) != fixed:
            raise HandoffRefused(
                TARGET, key, f"is {doc[section][name]}, and train_gpt2cu hard-codes {fixed}"
            )
    check_tokens(doc, target=TARGET, world=facts.world)
    return facts


def gaps(doc: Mapping[str, Any], facts: Facts) -> list[Gap]:
    """Every knob of the winner llm.c has no setting for, and what it runs instead."""
    rt, data, ckpt = doc["runtime"], doc["data"], doc["checkpoint"]
    out = []

    def gap(key: str, instead: tuple, kind: GapKind, **numbers: Any) -> None:
        section, name = key.split(".")
        value = doc[section][name]
        out.append(
            Gap(target=TARGET, key=key, value=value, instead=instead, kind=kind, numbers=numbers)
        )

    if rt["compile"] != "none":
        unit = rt.get("compile_unit", "model")
        gap("runtime.compile", ("none",), "no_torch_compile", compile_unit=unit)
    if rt["activation_checkpointing"] == "selective":
        gap("runtime.activation_checkpointing", ("none",), "recompute_no_policy")
    elif rt["activation_checkpointing"] != "none":
        gap("runtime.activation_checkpointing", ("none",), "recompute_gelu_layernorm")
    if rt.get("loss", "full") != "full":
        gap("runtime.loss", ("full",), "full_logits")
    if rt["attention"] not in ("auto", "cudnn"):
        gap("runtime.attention", ("auto", "cudnn"), "cudnn_or_own_attention")
    if rt.get("float8", "none") != "none":
        gap("runtime.float8", ("none",), "bf16_matmuls")
    if int(data["num_workers"]) > 0:
        gap("data.num_workers", (0,), "in_process_data")
    if not data["pin_memory"]:
        gap("data.pin_memory", (True,), "pinned_batches")
    if ckpt["mode"] != "sync":
        gap("checkpoint.mode", ("sync",), "sync_save")
    if str(doc["optim"]["fused"]).lower() == "false":
        gap("optim.fused", ("auto", "true"), "fused_adamw")
    if facts.world > 1:
        for name in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph"):
            gap(f"ddp.{name}", (), "own_nccl")
    if facts.device_type != "cuda":
        gap("runtime.device", (), "cuda_only")
    return out


def llmc_flags(doc: Mapping[str, Any], facts: Facts) -> list[tuple[str, str]]:
    """train_gpt2cu's flags, in the order llm.c's scripts write them."""
    m, b, o, t, ckpt, data = (
        doc[s] for s in ("model", "batch", "optim", "train", "checkpoint", "data")
    )
    every = int(ckpt["every_steps"])
    recompute = 0 if doc["runtime"]["activation_checkpointing"] == "none" else 2
    flags = [
        ("-i", f"{data['dir']}/{data['train_file']}"),
        ("-j", f"{data['dir']}/{data['val_file']}"),
        ("-o", str(ckpt["dir"])),
        ("-e", f"d{m['n_layer']}"),
        ("-b", str(b["micro_batch"])),
        ("-t", str(m["block_size"])),
        ("-d", str(b["tokens_per_step"])),
        ("-x", str(t["max_steps"])),
        ("-k", "cosine"),
        ("-l", repr(float(o["lr"]))),
        ("-u", str(o["warmup_steps"])),
        ("-q", repr(float(o["min_lr"]) / float(o["lr"]))),
        ("-c", repr(float(o["weight_decay"]))),
        ("-v", str(int(t["eval_every"]) or int(t["max_steps"]))),
        ("-m", str(t["eval_batches"])),
        ("-s", "0"),
        ("-f", "1" if doc["runtime"]["tf32"] else "0"),
        ("-r", str(recompute)),
        ("-z", "0"),
    ]
    if every:
        flags += [("-n", str(every)), ("-nk", str(ckpt["keep"])), ("-y", "1")]
    return flags


def llmc_script(doc: Mapping[str, Any], *, notes: list[str], lines: list[str]) -> str:
    """The shell script: `notes` and the cannot-express `lines` as comments, then the command."""
    facts = check(doc)
    flags = llmc_flags(doc, facts)
    launch = f"mpirun -np {facts.world} ./train_gpt2cu" if facts.world > 1 else "./train_gpt2cu"
    b = doc["batch"]
    head = [
        *notes,
        f"Build (in llm.c's folder): make train_gpt2cu USE_CUDNN=1 "
        f"PRECISION={PRECISION[facts.dtype]}",
        f"-d {int(b['tokens_per_step']):,} tokens per step = -b {b['micro_batch']} x -t "
        f"{doc['model']['block_size']} x {facts.world} process(es) x {b['grad_accum']} "
        f"accumulation steps (llm.c derives them)",
        f"data: -i/-j need llm.c token shards (256-int32 header); best.yaml's format is "
        f"{doc['data']['format']}",
    ]
    head += file_lines(TARGET, lines)
    args = " \\\n    ".join(f"{flag} {shlex.quote(v)}" for flag, v in flags)
    body = f"set -euo pipefail\n{launch} \\\n    {args}\n"
    return "#!/usr/bin/env bash\n" + comment_lines(head) + body


def refusal_script(refused: HandoffRefused, *, notes: list[str], lines: list[str]) -> str:
    """A script that says why llm.c cannot train this winner and exits 2 without running."""
    head = [*notes, str(refused), *lines]
    msg = shlex.quote(f"{FILE_NAME}: {refused}")
    return "#!/usr/bin/env bash\n" + comment_lines(head) + f"echo {msg} >&2\nexit 2\n"
