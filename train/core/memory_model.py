"""Predicted peak device memory of one training step: pure arithmetic, no torch.

The sweeper imports this to drop points that cannot fit before any trial runs, so it stays
torch-free (part of train/core/; tests/architecture/test_torch_free.py imports it in a fresh
interpreter and checks that torch stays unloaded).

What is counted is what `torch.cuda.max_memory_allocated` counts: bytes of live tensors, at the
worst moment of an optimizer step of *our* trainer (train/model/gpt.py, train/run/loop.py
train_step). C = n_embd, V = vocab_size, `a` = bytes of the compute dtype (2 under bf16/fp16
autocast, 4 fp32):

* fp32 master weights (4 B/param, the tied wte/lm_head once), fp32 gradients (4 B/param; they
  exist from the second micro-batch on, since gradients accumulate into `.grad`), AdamW's
  exp_avg and exp_avg_sq (8 B/param; made by the first step, so alive in every measured step).
* Autocast's low-precision copies of the matmul weights: cached for the whole forward, and each
  matmul saves its copy for backward (a checkpointed block's are not saved).
* Activations saved per block and token: the fp32 residual stream twice (block input and middle,
  8C), the two LayerNorm outputs (2aC), q/k/v (3aC), the attention output (aC; the fused kernels
  write it heads-last, so `.contiguous()` copies nothing), the MLP's 4C-wide input and GELU output
  (8aC): 8C + 14aC bytes (36C in bf16, 64C in fp32), plus LayerNorm statistics and the fused
  kernel's logsumexp. The math kernel runs in fp32 (torch upcasts it) and also saves its H x T x T
  probabilities. A checkpointed block keeps only its fp32 input (4C) and is recomputed in
  backward, one block at a time. Under `selective` (train/model/recompute.py) every block keeps
  its input and its matmul and attention outputs (4C + 10aC) and recomputes the rest in backward.
* The loss: logits (B, T, V) in the compute dtype, which `_, loss = model(x, y)` holds until the
  next micro-batch's forward returns, the fp32 log-probabilities log_softmax saves, and in
  backward their gradient and the logits' gradient: (2a + 8) bytes per token and vocab entry on
  CUDA (log_softmax writes fp32 straight from bf16 input), (a + 12) under CPU autocast (it copies
  to fp32 first). `runtime.loss=chunked` (train/model/loss.py) holds none of these: only one
  chunk's logits and the two gradients its forward computes (`chunked_loss_bytes`).
* Backward transients: GELU's and softmax's gradients in the block being differentiated, the
  tied weight's two gradients (lm_head's waits in autograd's buffer for the embedding's; both
  and their sum exist at the end of backward).
* torch.compile: inductor decides per graph what backward recomputes and what it saves, and its
  backward is one graph that holds what it saved until every gradient is out. The saved width of a
  block and the loss are calibrated, not derived op by op like the rest: on gpt2-xl compiled at
  micro-batch 4 (H100), 16 and 32 (H200), where memory binds, to within 1.3%; small gpt2
  (micro-batch 16, H100) comes out 10% high, on the safe side.

The peak is the largest of the candidate moments (`peak_candidates`); `parts` is the breakdown there
and `phase` its name. Checked: on CPU to within 1.1% of the tensor-level measurement for eager
fp32/bf16, fused/math attention, checkpointing none/every/every_k, grad_accum 1 or more
(scripts/bench/memory.py, train/measure/memory_meter.py), and within 0.3% for the chunked loss and
selective recompute (scripts/bench/levers_memory.py); on an H100 80GB and an H200 to within 10% of
max_memory_allocated (tests/train/test_memory_model.py). The chunked loss and selective recompute
are derived, not calibrated, and have not been measured on a GPU or under torch.compile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from train.core.config import ATTENTION_BACKENDS, COMPILE_MODES
from train.core.flops import num_params_of
from train.core.rules import (
    FLOAT8_RECIPES,
    check_loss,
    is_selective,
    loss_chunk_rows,
    num_checkpointed_blocks,
    parse_activation_checkpointing,
    resolve_dtype_name,
)
from train.core.units import GIB

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MATH_BYTES = 4  # the math SDPA kernel computes in fp32 whatever the autocast dtype
# runtime.float8, eager: counted as bf16 (torchao's eager float8 matmul saves the high-precision
# input and weight a bf16 linear saves and re-casts them in backward; not measured on a GPU).
# Compiled, see _COMPILED_FLOAT8_SAVED_BYTES.
DEVICE_TYPES = ("cuda", "cpu")
# MemoryInputs' fields that are the model's shape (train.core.config.ModelConfig's names).
MODEL_SHAPE = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias")

# Fraction of the device's memory (as torch reports it) that the predicted tensor peak must leave
# free, for what is on the card but is not a tensor: the CUDA context and kernel images (~0.5 GiB
# on an H100, 0.6%), cuBLAS/cuDNN workspaces (tens of MiB), and the caching allocator's
# fragmentation (memory reserved in segments that no live tensor fills; it grows with the mix of
# allocation sizes). The H100 data bounds it from below: gpt2-xl at micro-batch 16 ran out of
# memory although its predicted tensor peak, 77.7 GiB, is 1.8% under the card's 79.2 GiB. 8%
# (6.3 GiB there) is a chosen engineering margin above that bound, not a measured fragmentation
# figure (max_memory_reserved was not recorded); every measured run that fit stays inside it.
ALLOCATOR_MARGIN = 0.08

# torch.compile, fitted to four max_memory_allocated measurements
# (tests/train/test_memory_model.py): gpt2 mb16 and gpt2-xl mb4 on an H100 (2026-11-23), gpt2-xl
# mb16 and mb32 on an H200 (2026-11-26, 73.55 and 120.53 GiB: 2.93 GiB a micro-batch, nearly eager's
# 3.2). A block saves 4C (its fp32 input) + this many C-wide tensors in the compute dtype: 15.5,
# close to eager's 14 plus its 8C of fp32 (the earlier 8, fitted at small micro-batches only, put
# gpt2-xl mb32 at 88.8 GiB: 26% low). In backward the loss holds a bytes per token and vocab entry
# more than the logits' own: the fused cross-entropy backward keeps no fp32 copy (the fit wants
# none).
_COMPILED_SAVED_WIDTHS = 15.5
_COMPILED_LOSS_EXTRA = 0
# torch.compile with torchao float8 (tensorwise; rowwise assumed the same, unmeasured): the blocks'
# matmuls save their inputs and weights for backward as float8 (1 byte) and inductor recomputes
# the cheap norms and casts from the fp32 input rather than save bf16 copies, so a block keeps
# 4C + this many bytes x C per token (bf16 compiled: 15.5 x 2 = 31) and its weights' 1-byte
# copies. Fitted to gpt2-xl mb32 on the H200 (2026-11-26, docs/gpu/2026-11-26-h200/
# f8_tensorwise.json: 89.63 GiB measured, 120.89 predicted as bf16).
_COMPILED_FLOAT8_SAVED_BYTES = 18.25
_FLOAT8_WEIGHT_BYTES = 1


@dataclass(frozen=True, kw_only=True)
class MemoryInputs:
    """One configuration as the memory model sees it."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int  # the sequence length trained on
    vocab_size: int
    bias: bool = True
    micro_batch: int
    # resolved precision: fp32 | bf16 | fp16 (bf16/fp16 = autocast over fp32 master weights)
    dtype: str
    attention: str = "auto"  # auto | flash | efficient | cudnn | math (auto = a fused kernel)
    activation_checkpointing: str = "none"  # none | every | every_<k> | selective
    loss: str = "full"  # full | chunked (train/model/loss.py)
    compile: str = "none"  # torch.compile mode or none
    float8: str = "none"  # none | tensorwise | rowwise (torchao float8 matmuls in the blocks)
    device_type: str = "cuda"  # cuda | cpu
    # micro-batches per optimizer step; only "1 or more" matters: with more than one, `.grad`
    # already exists while the later micro-batches run forward and backward
    grad_accum: int = 2

    def __post_init__(self) -> None:
        for name in (
            "n_layer",
            "n_head",
            "n_embd",
            "block_size",
            "vocab_size",
            "micro_batch",
            "grad_accum",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"memory model: {name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"memory model: n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})"
            )
        _check_choice("dtype", self.dtype, tuple(DTYPE_BYTES), "use a resolved dtype, not auto")
        _check_choice("attention", self.attention, ATTENTION_BACKENDS)
        _check_choice("compile", self.compile, COMPILE_MODES)
        _check_choice("float8", self.float8, FLOAT8_RECIPES)
        _check_choice("device_type", self.device_type, DEVICE_TYPES)
        parse_activation_checkpointing(self.activation_checkpointing)
        check_loss(self.loss)


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Predicted peak of live tensor bytes, in GiB, and what it is made of at that moment."""

    peak_gib: float  # compare with torch.cuda.max_memory_allocated
    parts: dict[str, float] = field(default_factory=dict)  # name -> GiB; sums to peak_gib
    phase: str = ""  # the moment of the step where the peak falls


def _check_choice(name: str, value: str, allowed: tuple[str, ...], hint: str = "") -> None:
    if value not in allowed:
        extra = f"; {hint}" if hint else ""
        raise ValueError(f"memory model: {name} must be one of {allowed}, got {value!r}{extra}")


def num_params(inp: MemoryInputs) -> int:
    """Every parameter tensor's elements (tied embedding once, position embedding included)."""
    return num_params_of(inp, exclude_position_embedding=False)


def block_matmul_params(n_embd: int, *, bias: bool) -> int:
    """Weights (and biases) of one block's four Linear layers: what autocast casts."""
    return 12 * n_embd * n_embd + (9 * n_embd if bias else 0)


def compiled_float8(inp: MemoryInputs) -> bool:
    """Whether the blocks run torchao float8 matmuls under torch.compile (the fitted case)."""
    return inp.float8 != "none" and inp.compile != "none" and inp.dtype != "fp32"


def block_saved_bytes_per_token(inp: MemoryInputs) -> float:
    """Bytes one non-checkpointed block saves for backward, per token."""
    c, a = inp.n_embd, DTYPE_BYTES[inp.dtype]
    stats = 2 * 2 * 4  # mean and rstd of two LayerNorms, fp32
    if compiled_float8(inp):
        saved = 4 * c + _COMPILED_FLOAT8_SAVED_BYTES * c + stats
    elif inp.compile != "none":
        saved = 4 * c + _COMPILED_SAVED_WIDTHS * a * c + stats
    else:
        saved = 8 * c + 14 * a * c + stats
    if inp.attention == "math":
        # In fp32 even under autocast (torch upcasts math SDPA unless
        # allow_fp16_bf16_reduction_math_sdp): q, k, v copies in place of the 3aC projections,
        # and softmax(QK^T), T per query per head.
        saved += 3 * (MATH_BYTES - a) * c + inp.n_head * inp.block_size * MATH_BYTES
    else:
        saved += 4 * inp.n_head  # the fused kernel's fp32 logsumexp per head
    return saved


def selective_saved_bytes_per_token(inp: MemoryInputs) -> float:
    """Bytes a block under the selective policy (train/model/recompute.py) keeps per token: its
    fp32 input (4C) and every matmul and attention output in the compute dtype: q/k/v (3aC), the
    attention output (aC) and its projection (aC), the MLP's c_fc (4aC) and c_proj (aC) outputs:
    4C + 10aC, plus the fused kernel's logsumexp. The two projections' outputs are kept although
    backward never reads them (the policy keeps every matmul, as torchtitan's). The math kernel's
    matmuls are two bmm in fp32: its scores (T per head) and output (C), in place of the aC.
    Compiled, the partitioner keeps what backward reads of the kept ops: as compiled `none`."""
    c, a = inp.n_embd, DTYPE_BYTES[inp.dtype]
    if inp.compile != "none":
        return block_saved_bytes_per_token(inp)
    saved = 4 * c + 10 * a * c
    if inp.attention == "math":
        return saved + inp.n_head * inp.block_size * MATH_BYTES + (MATH_BYTES - a) * c
    return saved + 4 * inp.n_head


def block_backward_bytes_per_token(inp: MemoryInputs) -> float:
    """Extra bytes, on top of the saved activations, while a block runs backward.

    GELU's backward: the residual's fp32 gradient (4C), the gradient of the GELU output and the
    new gradient of its input (4C wide each), less the GELU output that c_proj saved, which
    autograd has freed by then: 4C + 4aC. With the math kernel, softmax's backward may be worse:
    the gradients of the probabilities and of the scores (T per head each), by when the MLP half
    of the block (4C + 9aC) is freed.
    """
    c, a = inp.n_embd, DTYPE_BYTES[inp.dtype]
    extra = 4 * c + 4 * a * c
    if inp.attention == "math":
        extra = max(extra, 2 * inp.n_head * inp.block_size * MATH_BYTES - 9 * a * c)
    return extra


def loss_bytes_per_token(inp: MemoryInputs) -> tuple[float, float, float]:
    """(forward end, start of backward, held through backward) bytes of the loss, per token.

    forward: logits plus fp32 log-probabilities (plus the fp32 copy CPU autocast makes); backward:
    also the log-probabilities' gradient and the logits' gradient; held: the logits themselves,
    which `_, loss = model(x, y)` keeps until the next forward returns.
    """
    v, a = inp.vocab_size, DTYPE_BYTES[inp.dtype]
    amp = inp.dtype != "fp32"
    if inp.compile != "none":
        return (a + 4) * v, (a + _COMPILED_LOSS_EXTRA) * v, a * v
    if amp and inp.device_type == "cpu":
        return (a + 8) * v, (a + 12) * v, a * v
    return (a + 4) * v, (2 * a + 8) * v, a * v


def chunked_loss_bytes(inp: MemoryInputs, tokens: int) -> tuple[float, float, float]:
    """(forward end, start of backward, held through backward) bytes of runtime.loss=chunked
    (train/model/loss.py) at `tokens` rows: no (tokens, V) tensor ever, only a chunk's.

    Held from its forward to its backward: the hidden states' gradient (aC per row) and the
    weight's fp32 gradient (4VC). During the last chunk also its fp32 logits, turned in place
    into the softmax gradient, and that gradient's copy in the compute dtype under autocast
    (4 + a bytes per chunk row and vocab entry), the weight's gradient matmul output (aVC), the
    final hidden states (4C per row; under autocast also their aC copy) and the weight's copy in
    the compute dtype (aVC). Backward scales both gradients into new tensors (4C per row, twice
    under autocast for the cast, and 4VC). Nothing is held once the loss's backward is done.
    """
    c, v, a = inp.n_embd, inp.vocab_size, DTYPE_BYTES[inp.dtype]
    amp = inp.dtype != "fp32"
    chunk = loss_chunk_rows(rows=tokens, n_embd=c, vocab_size=v)
    held = a * c * tokens + 4.0 * v * c
    hidden = (4 + (a if amp else 0)) * c * tokens
    chunk_bytes = (4 + (a if amp else 0)) * chunk * v + a * v * c + a * c * chunk
    forward = held + hidden + chunk_bytes + (a * v * c if amp else 0)
    backward = held + (8 if amp else 4) * c * tokens + 4.0 * v * c
    return forward, backward, 0.0


def peak_candidates(inp: MemoryInputs) -> dict[str, dict[str, float]]:
    """Live tensor bytes, by part, at each moment of a step that can hold the peak."""
    tokens = inp.micro_batch * inp.block_size
    c, v, a = inp.n_embd, inp.vocab_size, DTYPE_BYTES[inp.dtype]
    amp = inp.dtype != "fp32"
    n_params = num_params(inp)
    n_ckpt = num_checkpointed_blocks(inp.n_layer, inp.activation_checkpointing)
    n_full = inp.n_layer - n_ckpt
    # what a checkpointed block keeps: its fp32 input, and under selective its matmul outputs
    kept = (
        selective_saved_bytes_per_token(inp)
        if is_selective(inp.activation_checkpointing)
        else 4 * c
    )
    chunked = inp.loss == "chunked"
    accumulating = inp.grad_accum > 1

    grads = 4.0 * n_params if accumulating else 0.0
    block_copy, copies_fwd, copies_bwd = _autocast_copies(inp, n_full=n_full)

    per_block = block_saved_bytes_per_token(inp) * tokens
    blocks = n_full * per_block + n_ckpt * kept * tokens
    # ln_f's fp32 input and its output (lm_head's input; the chunked loss keeps none), the token
    # ids and targets (int64)
    head = (4 * c + (0 if chunked else a * c) + 8 + 16) * tokens
    activations = blocks + head
    if chunked:
        loss_fwd, loss_bwd, logits = chunked_loss_bytes(inp, tokens)
    else:
        loss_fwd, loss_bwd, logits = (x * tokens for x in loss_bytes_per_token(inp))
    old_logits = logits if accumulating else 0.0

    # a checkpointed block's recompute: what it did not keep, again
    recompute = per_block - kept * tokens + block_copy if n_ckpt else 0.0
    # one 4C x C weight's gradient in the compute dtype, and its fp32 cast under autocast
    weight_grad = 4 * c * c * (a + (4 if amp else 0))
    block_bwd = recompute + block_backward_bytes_per_token(inp) * tokens + weight_grad
    # The tied wte/lm_head weight gets two gradients: lm_head's arrives first and waits in
    # autograd's input buffer until the embedding's dense (V, C) one arrives at the very end,
    # when the two are summed into a third before `.grad` takes it: 3 x 4VC at the end.
    head_grad = 4.0 * v * c
    # the optimizer step, and the end of backward before it: every gradient out
    stepping = {"weights": 4.0 * n_params, "grads": 4.0 * n_params, "optimizer": 8.0 * n_params}
    state = {**stepping, "grads": grads}
    return {
        "forward_end": {
            **state,
            "autocast_copies": copies_fwd,
            "activations": activations,
            "loss": loss_fwd + old_logits,
        },
        "loss_backward": {
            **state,
            "autocast_copies": copies_bwd,
            "activations": activations,
            "loss": loss_bwd,
        },
        "block_backward": {
            **state,
            "grads": grads + head_grad,
            "autocast_copies": copies_bwd,
            "activations": blocks,
            "loss": logits,
            "transient": block_bwd,
        },
        "backward_end": _backward_end(
            inp, stepping, logits=logits, copies=copies_bwd, activations=activations
        ),
        "optimizer_step": stepping,
    }


def _autocast_copies(inp: MemoryInputs, *, n_full: int) -> tuple[float, float, float]:
    """Autocast's weight copies: one block's, and all of them, cached until the forward ends;
    afterwards only the ones saved for backward live on (checkpointed blocks save none)."""
    if inp.dtype == "fp32":
        return 0.0, 0.0, 0.0
    c, v, a = inp.n_embd, inp.vocab_size, DTYPE_BYTES[inp.dtype]
    copy_bytes = _FLOAT8_WEIGHT_BYTES if compiled_float8(inp) else a
    block_copy = copy_bytes * block_matmul_params(c, bias=inp.bias)
    head_copy = a * v * c if inp.loss != "chunked" else 0.0  # the chunked loss casts its own
    return block_copy, inp.n_layer * block_copy + head_copy, n_full * block_copy + head_copy


def _backward_end(
    inp: MemoryInputs, stepping: dict, *, logits: float, copies: float, activations: float
) -> dict[str, float]:
    """The end of backward: `stepping`'s weights, gradients and optimizer state, the logits still
    held, and the tied weight's two gradients and their sum (3 x 4VC)."""
    c, v, a = inp.n_embd, inp.vocab_size, DTYPE_BYTES[inp.dtype]
    tokens = inp.micro_batch * inp.block_size
    parts = {**stepping, "loss": logits, "transient": 3 * (4.0 * v * c)}
    if inp.compile != "none":
        # one backward graph: what it saved is still alive as the gradients come out (the
        # chunked loss's two gradients too). An earlier form also held a second fp32 set of
        # every gradient here; the H200 measurements at micro-batch 16 and 32 put the peak at
        # the forward's end with no such set, and gpt2-xl mb4 fits without it
        parts.update(
            autocast_copies=copies,
            activations=activations,
            loss=a * c * tokens + 4.0 * v * c if inp.loss == "chunked" else logits,
        )
    return parts


def predict_memory(inp: MemoryInputs) -> MemoryEstimate:
    """The predicted peak of live tensors during a measured optimizer step (after warm-up)."""
    candidates = peak_candidates(inp)
    phase = max(candidates, key=lambda name: sum(candidates[name].values()))
    parts = {name: nbytes / GIB for name, nbytes in candidates[phase].items() if nbytes}
    return MemoryEstimate(peak_gib=sum(parts.values()), parts=parts, phase=phase)


def usable_gib(device_gib: float) -> float:
    """The memory a training step's tensors may use on a device of `device_gib` GiB."""
    return device_gib * (1.0 - ALLOCATOR_MARGIN)


def fits(est: MemoryEstimate, device_gib: float) -> bool:
    """Whether the predicted peak leaves ALLOCATOR_MARGIN of the device's memory free."""
    if device_gib <= 0:
        raise ValueError(f"device memory must be > 0 GiB, got {device_gib}")
    return est.peak_gib <= usable_gib(device_gib)


def _get(cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    if key in cfg:
        return cfg[key]
    if default is None:
        raise ValueError(f"memory model: the config has no {key!r}; pass the composed config")
    return default


def inputs_from_config(
    cfg: Mapping[str, Any],
    *,
    micro_batch: int | None = None,
    dtype: str | None = None,
    device_type: str = "cuda",
) -> MemoryInputs:
    """MemoryInputs from a flat dotted config ({"model.n_layer": 48, "batch.micro_batch": 4,
    "runtime.dtype": "bf16", ...}); `micro_batch` and `dtype` override the config's. dtype
    "auto" resolves as the trainer does on a device with bf16: bf16 on cuda, fp32 on cpu."""
    mb = int(micro_batch if micro_batch is not None else _get(cfg, "batch.micro_batch"))
    block = int(_get(cfg, "model.block_size"))
    requested = str(dtype if dtype is not None else cfg.get("runtime.dtype", "auto"))
    resolved = resolve_dtype_name(requested, device_type=device_type, bf16_supported=True)
    tokens_per_step = cfg.get("batch.tokens_per_step")
    if tokens_per_step:
        accum = max(1, int(tokens_per_step) // (mb * block))
    elif micro_batch is None:
        accum = int(cfg.get("batch.grad_accum", 2))
    else:
        accum = 2  # unknown split: assume accumulation (the larger prediction)
    return MemoryInputs(
        n_layer=int(_get(cfg, "model.n_layer")),
        n_head=int(_get(cfg, "model.n_head")),
        n_embd=int(_get(cfg, "model.n_embd")),
        block_size=block,
        vocab_size=int(_get(cfg, "model.vocab_size")),
        bias=bool(cfg.get("model.bias", True)),
        micro_batch=mb,
        dtype=resolved,
        attention=str(cfg.get("runtime.attention", "auto")),
        activation_checkpointing=str(cfg.get("runtime.activation_checkpointing", "none")),
        loss=str(cfg.get("runtime.loss", "full")),
        compile=str(cfg.get("runtime.compile", "none")),
        float8=str(cfg.get("runtime.float8", "none")),
        device_type=device_type,
        grad_accum=accum,
    )
