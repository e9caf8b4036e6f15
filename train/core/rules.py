"""The rules a trainer config obeys across its fields, on plain values: the batch split, the
precision a run resolves to, the blocks activation checkpointing recomputes, and the combinations
that cannot work (CUDA graphs with gradient accumulation, fp16 on a CPU, flash or cuDNN attention
in fp32).

Part of the torch-free core, below the schema: it imports nothing from train/. Each rule is stated
once, here, and the sweeper refuses points with the very functions the trainer
refuses configs with (`dtype_unsupported`, `cudagraph_conflict`, `attention_dtype_conflict`,
`resolve_dtype_name`, `sequences_per_device`, `valid_splits`, `grad_accum_for`,
`num_checkpointed_blocks`, `is_selective`, `check_loss`, `loss_chunk_rows`, `check_compile_unit`).
`train/core/config_checks.py` applies them to a whole config (`check_batch`, `check_combinations`);
callers import each rule from here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import stat
from dataclasses import dataclass
from typing import Any

# Modes that capture CUDA graphs. With gradient accumulation they error or silently produce wrong
# gradients (pytorch/pytorch#169545, #96693), so such combinations are refused.
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
# runtime.compile_unit: what torch.compile compiles. `model`: the whole model, one graph (nanoGPT's
# `torch.compile(model)`). `block`: regional compilation (PyTorch's regional compilation recipe,
# torchtitan's per-block compile): one function that runs a transformer block, compiled once and
# reused by every block (the same code over other weights: Dynamo's guards pass, no recompile),
# and the head (final LayerNorm, LM head, loss) compiled on its own; the embeddings run eager. A
# cold compile then no longer grows with the depth (train/model/regional.py).
COMPILE_UNITS = ("model", "block")
# SDPA backends whose CUDA kernels take fp16/bf16 only: torch's can_use_flash_attention and
# can_use_cudnn_attention (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) accept kHalf and
# kBFloat16, the efficient kernel also kFloat. Seen on an H100 with torch 2.11: fp32 causal SDPA
# runs forward and backward under efficient and math, and raises under flash and cudnn.
HALF_ONLY_CUDA_ATTENTION = ("flash", "cudnn")


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """Why `key=value` cannot run here, in parts: the setting, its value and the reason that
    follows them. `str()` is the whole sentence (`runtime.dtype=fp16 is not supported on CPU`);
    a reader listing several values of one key shows `reason` alone (sweeper/space/params.py)."""

    key: str
    value: Any
    reason: str
    sep: str = " "  # between `key=value` and the reason: " " or ": "

    def __str__(self) -> str:
        return f"{self.key}={self.value}{self.sep}{self.reason}"


# runtime.activation_checkpointing=selective: every block checkpointed with an op-level policy
# (train/model/recompute.py) that keeps the matmul and attention outputs and recomputes only the
# cheap pointwise ops (LayerNorm, GELU, residual adds) in backward: torchtitan's `selective` op
# policy.
SELECTIVE = "selective"
# runtime.loss: `full` computes the (B*T, vocab) logits and their cross-entropy at once; `chunked`
# computes the LM head and the loss a chunk of rows at a time (train/model/loss.py), never holding
# the full fp32 logits or their gradient.
LOSS_MODES = ("full", "chunked")
# chunked loss: the smallest chunk (rows), and the most chunks a step is cut into (the chunk loop
# is unrolled under torch.compile, so few, large chunks)
LOSS_CHUNK_MIN_ROWS = 128
LOSS_CHUNK_MAX_CHUNKS = 32


def check_compile_unit(unit: object) -> None:
    """Refuse a runtime.compile_unit outside COMPILE_UNITS, naming the key and the choices."""
    if unit not in COMPILE_UNITS:
        raise ValueError(
            f"runtime.compile_unit must be one of {COMPILE_UNITS} (model: torch.compile of the "
            f"whole model; block: each transformer block compiled once and reused, a shorter cold "
            f"compile), got {unit!r}"
        )


def parse_activation_checkpointing(s: str) -> int:
    """ "none" -> 0, "every" -> 1, "every_<k>" -> k (checkpoint every k-th block); "selective"
    -> 1 (every block, op-level: `is_selective`)."""
    if s == "none":
        return 0
    if s in ("every", SELECTIVE):
        return 1
    m = re.fullmatch(r"every_([0-9]+)", s)
    if m and int(m.group(1)) >= 1:
        return int(m.group(1))
    raise ValueError(
        f"runtime.activation_checkpointing must be 'none', 'every' or 'every_<k>' with k >= 1 "
        f"(e.g. 'every_2'), or 'selective' (op-level: keep matmul and attention outputs, "
        f"recompute pointwise ops), got {s!r}"
    )


def is_selective(activation_checkpointing: str) -> bool:
    """Whether the policy is op-level selective (every block, matmul outputs kept)."""
    return parse_activation_checkpointing(activation_checkpointing) > 0 and (
        activation_checkpointing == SELECTIVE
    )


def check_loss(loss: str) -> None:
    """Refuse a runtime.loss outside LOSS_MODES, naming the key and the choices."""
    if loss not in LOSS_MODES:
        raise ValueError(
            f"runtime.loss must be one of {LOSS_MODES} (chunked: the LM head and cross-entropy "
            f"in chunks of rows, never the full fp32 logits), got {loss!r}"
        )


def loss_chunk_rows(*, rows: int, n_embd: int, vocab_size: int) -> int:
    """Rows of the (rows, n_embd) final hidden states the chunked loss takes at once.

    A chunk's logits are made about as large as the hidden states (chunk x vocab ~ rows x n_embd,
    the rule Liger-Kernel's fused linear cross-entropy uses), rounded up to a power of two, at
    least LOSS_CHUNK_MIN_ROWS rows and at most LOSS_CHUNK_MAX_CHUNKS chunks: gpt2-xl at
    micro-batch 16 (16,384 rows, 1600 wide, vocab 50304) runs 16 chunks of 1024 rows."""
    target = -(-rows * n_embd // vocab_size)  # ceil
    chunk = 1 << max(0, (target - 1).bit_length())  # the next power of two
    chunk = max(chunk, LOSS_CHUNK_MIN_ROWS, -(-rows // LOSS_CHUNK_MAX_CHUNKS))
    return max(1, min(chunk, rows))


def num_checkpointed_blocks(n_layer: int, activation_checkpointing: str) -> int:
    """Blocks recomputed in backward: block i is checkpointed when (i + 1) % k == 0 (the model's
    rule, train.model.gpt), so n_layer // k of them (selective: every block, op-level)."""
    k = parse_activation_checkpointing(activation_checkpointing)
    return n_layer // k if k else 0


def world_size(nproc: int = 1) -> int:
    """Processes taking part in one optimizer step: torchrun's WORLD_SIZE inside a launched
    process, else the runtime.nproc the run will be launched with."""
    return int(os.environ.get("WORLD_SIZE", nproc))


def sequences_per_device(*, tokens_per_step: int, block_size: int, world: int = 1) -> int | None:
    """Sequences one device runs per optimizer step (micro_batch x grad_accum), or None when the
    tokens per step do not divide evenly into sequences on `world` devices."""
    n, rem = divmod(tokens_per_step, block_size * world)
    return n if n > 0 and rem == 0 else None


def valid_splits(*, tokens_per_step: int, block_size: int, world: int = 1) -> list[tuple[int, int]]:
    """Every (micro_batch, grad_accum) with micro_batch x grad_accum x block_size x world ==
    tokens_per_step."""
    per_device = sequences_per_device(
        tokens_per_step=tokens_per_step, block_size=block_size, world=world
    )
    if per_device is None:
        return []
    return [(mb, per_device // mb) for mb in range(1, per_device + 1) if per_device % mb == 0]


def grad_accum_for(
    micro_batch: Any, *, tokens_per_step: int, block_size: int, world: int = 1
) -> int | None:
    """The grad_accum that keeps the tokens per step at this micro_batch, or None if none does."""
    per_device = sequences_per_device(
        tokens_per_step=tokens_per_step, block_size=block_size, world=world
    )
    if per_device is None or not isinstance(micro_batch, int) or micro_batch < 1:
        return None
    return per_device // micro_batch if per_device % micro_batch == 0 else None


def grad_accum_across_ranks(
    *, tokens_per_step: int, micro_batch: int, grad_accum: int, block_size: int, world: int
) -> int | None:
    """The per-rank grad_accum that keeps `tokens_per_step` at this micro_batch on `world` ranks,
    for a split made for another number of ranks (a best.yaml swept on one process, trained on
    several); None where the split already fits `world`, fits no whole number of ranks (a wrong
    split, refused as such), or no grad_accum keeps the tokens at this micro_batch on `world`."""
    made_for, rem = divmod(tokens_per_step, micro_batch * grad_accum * block_size)
    if rem or made_for < 1 or made_for == world:
        return None
    return grad_accum_for(
        micro_batch, tokens_per_step=tokens_per_step, block_size=block_size, world=world
    )


def resolve_dtype_name(requested: str, *, device_type: str, bf16_supported: bool) -> str:
    """runtime.dtype as a run resolves it: `auto` is bf16 on a CUDA device that has it, else fp32
    (bf16 is slower than fp32 on most CPUs). Torch-free: the trainer (train.run.loop.resolve_dtype),
    the sweeper and the memory model all resolve through this one rule."""
    if requested in (None, "auto"):
        return "bf16" if device_type == "cuda" and bf16_supported else "fp32"
    return str(requested)


def dtype_unsupported(
    dtype: str, *, device_type: str, bf16_supported: bool = True
) -> Refusal | None:
    """Why a device of `device_type` cannot compute in the resolved `dtype`, or None. CPU fp16
    kernels are slow or missing for many ops, so a result there would mean nothing; a CUDA device
    without native bf16 would emulate it and make the throughput numbers lie."""
    if device_type == "cpu" and dtype == "fp16":
        return Refusal(key="runtime.dtype", value="fp16", reason="is not supported on CPU")
    if device_type == "cuda" and dtype == "bf16" and not bf16_supported:
        return Refusal(
            key="runtime.dtype", value="bf16", reason="on a CUDA device without bf16 support"
        )
    return None


def cudagraph_conflict(compile_mode: Any, grad_accum: Any, *, device_type: str) -> Refusal | None:
    """Why torch.compile mode `compile_mode` cannot run with `grad_accum` micro-batches per step
    on `device_type`, or None. The CUDAGRAPH_MODES capture CUDA graphs, which with gradient
    accumulation error or silently corrupt gradients (pytorch/pytorch#169545, #96693)."""
    if device_type != "cuda" or compile_mode not in CUDAGRAPH_MODES or (grad_accum or 1) <= 1:
        return None
    return Refusal(
        key="runtime.compile",
        value=compile_mode,
        reason=(
            f"captures CUDA graphs, unsafe with batch.grad_accum={grad_accum} > 1 "
            "(pytorch/pytorch#169545, #96693)"
        ),
    )


def attention_dtype_conflict(
    attention: str, dtype: str, *, device_type: str, bf16_supported: bool = True
) -> Refusal | None:
    """Why SDPA backend `attention` cannot run at precision `dtype` on `device_type`, or None.

    `dtype` is runtime.dtype: "auto" counts as what it resolves to (bf16 on a CUDA device with
    `bf16_supported`, else fp32, as train.run.loop.resolve_dtype does). Torch-free, so the sweeper
    drops these combinations before sampling with the same rule the trainer refuses them by; the
    trainer's SDPA probe still checks what a rule cannot see (head size, GPU generation).
    """
    if device_type != "cuda" or attention not in HALF_ONLY_CUDA_ATTENTION:
        return None
    resolved = resolve_dtype_name(dtype, device_type=device_type, bf16_supported=bf16_supported)
    if resolved != "fp32":
        return None
    runs = "runs fp32" if dtype == "fp32" else "resolves to fp32 (this GPU has no bf16)"
    return Refusal(
        key="runtime.attention",
        value=attention,
        reason=(
            "has no fp32 kernel on CUDA (flash and cuDNN attention take fp16/bf16 only) and "
            f"runtime.dtype={dtype} {runs}"
        ),
    )


# runtime.float8 recipes (torchao's Float8LinearConfig.from_recipe_name names, and "none").
FLOAT8_RECIPES = ("none", "tensorwise", "rowwise")
# float8 tensor cores (the e4m3/e5m2 matmuls torch._scaled_mm runs) exist from compute capability
# 8.9 on: Ada (8.9), Hopper (9.0), Blackwell (10.x). torchao's float8 training checks the same.
FLOAT8_MIN_CAPABILITY = (8, 9)
# runtime.attention values that activate a flash attention implementation torch registers
# (torch.nn.attention.list_flash_attention_impls(), torch >= 2.11; "FA3" -> "fa3"). They run
# only on CUDA; which of them exists is asked of the installed torch (train/model/attention.py).
FLASH_IMPLS = ("fa3", "fa4")


# The package each of torch's registered flash implementations imports when activated (the
# default module_path of register_flash_attention_fa3/_fa4 in torch/nn/attention/_fa3.py, _fa4.py).
FLASH_IMPL_PACKAGES = {"fa3": "flash_attn_interface", "fa4": "flash_attn"}


def installed_flash_impls(listed: list[str] | tuple[str, ...]) -> list[str]:
    """Of the flash implementations a torch lists (list_flash_attention_impls()), lower-cased,
    those whose package is installed, so activating them can work (asked without importing)."""
    names = [str(name).lower() for name in listed]
    return [
        n
        for n in names
        if n not in FLASH_IMPL_PACKAGES or importlib.util.find_spec(FLASH_IMPL_PACKAGES[n])
    ]


def torchao_installed() -> bool:
    """Whether torchao can be imported here, asked without importing it (nor torch)."""
    return importlib.util.find_spec("torchao") is not None


def float8_unsupported(
    float8: str,
    *,
    dtype: str,
    device_type: str,
    capability: tuple[int, int] | None,
    emulate: bool = False,
    bf16_supported: bool = True,
    torchao: bool | None = None,
) -> Refusal | None:
    """Why runtime.float8=`float8` cannot run here, as one line with the fix, or None.

    `dtype` is runtime.dtype ("auto" resolves as the trainer resolves it); `capability` is the
    CUDA device's (major, minor), None where unknown or on a CPU. With `emulate` (torchao's
    emulate mode: float8 rounding in high-precision matmuls, no speed-up) any device passes the
    hardware rule, so a CPU can test the plumbing. `torchao` None probes the installed packages.
    """
    if float8 in (None, "none"):
        return None
    if torchao is None:
        torchao = torchao_installed()
    if not torchao:
        why = (
            "needs torchao, which is not installed: pip install 'throughput-sweep[gpu]' (or "
            "torchao), or runtime.float8=none"
        )
        return Refusal(key="runtime.float8", value=float8, reason=why)
    need = ".".join(map(str, FLOAT8_MIN_CAPABILITY))
    if not emulate and device_type != "cuda":
        why = (
            f"needs a CUDA GPU with compute capability >= {need} (float8 tensor cores), and this "
            f"run's device is {device_type}; use such a GPU, or runtime.float8_emulate=true to "
            "test the plumbing (emulated, no speed-up)"
        )
        return Refusal(key="runtime.float8", value=float8, reason=why)
    if not emulate and capability is not None and tuple(capability) < FLOAT8_MIN_CAPABILITY:
        got = ".".join(map(str, capability))
        why = (
            f"needs compute capability >= {need} (float8 tensor cores: Ada, Hopper, Blackwell), "
            f"this GPU has {got}; use runtime.float8=none"
        )
        return Refusal(key="runtime.float8", value=float8, reason=why)
    resolved = resolve_dtype_name(dtype, device_type=device_type, bf16_supported=bf16_supported)
    if resolved != "bf16":
        why = (
            "needs runtime.dtype=bf16 (torchao's float8 training casts from bf16 activations and "
            f"weights), got runtime.dtype={dtype} ({resolved}); set runtime.dtype=bf16 or "
            "runtime.float8=none"
        )
        return Refusal(key="runtime.float8", value=float8, reason=why)
    return None


def flash_impl_unsupported(
    attention: str, *, device_type: str, installed: tuple[str, ...] | list[str] | None
) -> Refusal | None:
    """Why runtime.attention=`attention` (a flash implementation such as "fa3") cannot run here,
    as one line with the fix, or None. `installed` is what the installed torch lists
    (list_flash_attention_impls(), lower-cased) and can activate (its package importable); None
    where not known (a plan device)."""
    if attention not in FLASH_IMPLS:
        return None
    if device_type != "cuda":
        why = (
            f"is a CUDA flash attention implementation and this run's device is {device_type}; "
            "use runtime.attention=auto (or flash/math)"
        )
        return Refusal(key="runtime.attention", value=attention, reason=why)
    if installed is not None and attention not in installed:
        why = (
            "no such flash attention implementation is installed here (torch's "
            f"list_flash_attention_impls() with its package importable: {sorted(installed)}); use "
            "runtime.attention=auto or flash"
        )
        return Refusal(key="runtime.attention", value=attention, reason=why, sep=": ")
    return None


def check_compile_cache(value: object, *, field: str = "runtime.compile_cache") -> None:
    """torch.compile's cache setting (train/core/compile_cache.py): '' (torch's default), 'off',
    or a folder; a path that is a file is refused, and so is a folder others can write to."""
    if not isinstance(value, str):
        raise ValueError(f"{field} must be '' (torch's default), 'off' or a folder, got {value!r}")
    if value in ("", "off"):
        return
    path = os.path.expanduser(value)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(
            f"{field}={value!r} is a file, not a folder; give a folder for torch's compile cache "
            f"or 'off' to compile cold every time"
        )
    if os.path.isdir(path):
        # the cache holds generated Python and shared objects that torch imports and runs: a
        # folder others can write into is a folder they can plant code in
        st = os.stat(path)
        if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP) or st.st_uid != os.getuid():
            who = (
                "others can write to it"
                if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP)
                else f"it belongs to uid {st.st_uid}, not this user ({os.getuid()})"
            )
            raise ValueError(
                f"{field}={value!r}: {who} (mode {stat.S_IMODE(st.st_mode):o}), and torch runs the "
                f"code it finds there; use a folder only you can write (chmod go-w {path}), or "
                f"'off' to compile cold"
            )


# A storage URL that holds a secret reaches a trial by name, never on its command line (where ps,
# Hydra's .hydra/ files and the result's config would keep it): the sweep puts it in this
# environment variable of its trials and passes `trial.study_storage=env:<name>`.
STORAGE_ENV = "THROUGHPUT_SWEEP_STORAGE"
ENV_REFERENCE = "env:"


def resolve_storage(value: str) -> str:
    """trial.study_storage as a URL: `env:NAME` read from the environment (ValueError in one line
    where it is unset), anything else as given."""
    if not value.startswith(ENV_REFERENCE):
        return value
    name = value[len(ENV_REFERENCE) :]
    url = os.environ.get(name, "")
    if not url:
        raise ValueError(
            f"trial.study_storage={value} names the environment variable {name}, which is not set "
            f"in this process (the sweep sets it for the trials it starts); set it, or give the "
            f"storage URL itself"
        )
    return url
