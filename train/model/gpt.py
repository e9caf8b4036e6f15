"""GPT-2 in one file, after nanoGPT's model.py (karpathy/nanoGPT), written in our own words.

Parameter names match the GPT-2 checkpoints (wte, wpe, h.N.attn.c_attn, ...). Attention is
torch's fused scaled_dot_product_attention with a causal mask; which kernel it uses is governed
by train/model/attention.py. Activation checkpointing trades recompute for memory, per block or
op by op (train/model/recompute.py); the LM head and its loss run whole or in chunks of rows
(train/model/loss.py). Every block runs through one function, `run_block`, and the head through
`run_head`: runtime.compile_unit=block compiles those two (train/model/regional.py), so one graph
serves all the blocks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from train.core.config import ModelConfig
from train.core.rules import check_loss, is_selective, parse_activation_checkpointing
from train.model.attention import sdpa_context
from train.model.loss import IGNORE_INDEX, chunked_cross_entropy, full_cross_entropy
from train.model.recompute import checkpointed

log = logging.getLogger(__name__)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, *, attention: str = "auto") -> None:
        super().__init__()
        # The SDPA backend is chosen here, inside forward, not around the model call: an
        # activation-checkpointed block recomputes its forward during backward, outside any
        # context the caller entered, and a recompute on another kernel than the forward saves
        # different tensors (torch.utils.checkpoint's CheckpointError).
        self.attention = attention
        # q, k, v projections for all heads in one matmul
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()  # batch, sequence length, n_embd
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x (B, T, C)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        with sdpa_context(self.attention):
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
            )  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again: (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))  # (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: ModelConfig, *, attention: str = "auto") -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg, attention=attention)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))  # (B, T, C)


def run_block(
    block: nn.Module, x: torch.Tensor, *, recompute: bool, selective: bool
) -> torch.Tensor:
    """block(x); with `recompute`, under activation checkpointing (only its input kept, or with
    `selective` also its matmul and attention outputs; the rest recomputed in backward). Every
    block of a GPT runs through this one function, so compiling it compiles one graph for all."""
    if recompute:
        return checkpointed(block, x, selective=selective)
    return block(x)


def run_head(
    ln_f: nn.Module,
    weight: torch.Tensor,
    x: torch.Tensor,
    targets: torch.Tensor | None,
    *,
    loss_mode: str,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The final LayerNorm, the LM head (its `weight` tied to the token embedding) and, with
    targets, the mean cross-entropy: (logits (B, T, vocab), loss); chunked: (None, loss)."""
    x = ln_f(x)  # (B, T, C)
    if targets is None:
        return F.linear(x, weight), None  # (B, T, vocab)
    flat, flat_targets = x.view(-1, x.size(-1)), targets.view(-1)  # (B*T, C), (B*T,)
    if loss_mode == "chunked":
        # the head and loss a chunk of rows at a time: no (B*T, vocab) logits to return
        loss = chunked_cross_entropy(flat, weight, flat_targets, ignore_index=IGNORE_INDEX)
        return None, loss
    logits, loss = full_cross_entropy(flat, weight, flat_targets, ignore_index=IGNORE_INDEX)
    return logits.view(*x.shape[:-1], -1), loss  # (B, T, vocab)


class GPT(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        *,
        activation_checkpointing: str = "none",
        attention: str = "auto",
        loss: str = "full",
    ) -> None:
        super().__init__()
        self.config = cfg
        # 0: no checkpointing; k: recompute every k-th block in backward instead of storing it.
        self.checkpoint_every = parse_activation_checkpointing(activation_checkpointing)
        # selective: every block, keeping its matmul and attention outputs (op-level policy)
        self.selective = is_selective(activation_checkpointing)
        check_loss(loss)
        self.loss_mode = loss  # full | chunked
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
                wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
                drop=nn.Dropout(cfg.dropout),
                h=nn.ModuleList([Block(cfg, attention=attention) for _ in range(cfg.n_layer)]),
                ln_f=nn.LayerNorm(cfg.n_embd, bias=cfg.bias),
            )
        )
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # what runs each block and the head: these functions, or their compiled versions
        # (runtime.compile_unit=block, train/model/regional.py compile_regions)
        self.block_fn: Callable[..., torch.Tensor] = run_block
        self.head_fn: Callable[..., tuple[torch.Tensor | None, torch.Tensor | None]] = run_head
        # Weight tying (Press & Wolf 2017), as GPT-2: one matrix embeds and un-embeds tokens.
        self.transformer.wte.weight = self.lm_head.weight
        self.init_weights()
        log.debug("GPT %s: %.2fM parameters", cfg.name, self.num_params() / 1e6)

    def init_weights(self) -> None:
        """GPT-2's initialisation, drawn from the RNG of the device the weights are on (a no-op
        for weights on the meta device: `materialize` draws them on the real one)."""
        self.apply(self._init_weights)
        # GPT-2 paper: scale residual-branch output projections by 1/sqrt(2 * n_layer), since
        # each block adds two of them to the residual stream.
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))

    def materialize(self, device: torch.device) -> None:
        """Give a model built under `torch.device("meta")` its storage on `device` and initialise it
        there: no host copy of the weights, no default init that `init_weights` then overwrites,
        and on a GPU the draws run on the GPU (seed with torch.manual_seed first)."""
        self.to_empty(device=device)
        # to_empty gives each module its own new tensor, so the tied matrix is tied again
        self.transformer.wte.weight = self.lm_head.weight
        self.init_weights()

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            module.reset_parameters()  # ones and zeros (a meta-built model has neither yet)

    def num_params(self, *, exclude_position_embedding: bool = True) -> int:
        """Parameter count (tied wte/lm_head counted once); wpe excluded by default as in
        nanoGPT, because a lookup table does no matmul FLOPs."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_position_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    def _checkpointed(self, i: int) -> bool:
        k = self.checkpoint_every
        return k > 0 and self.training and torch.is_grad_enabled() and (i + 1) % k == 0

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """idx (B, T) token ids -> (logits (B, T, vocab), mean cross-entropy or None); with
        targets under runtime.loss=chunked the logits are never made whole: (None, loss)."""
        t = idx.size(1)
        if t > self.config.block_size:
            raise ValueError(
                f"sequence length {t} exceeds model.block_size {self.config.block_size}; "
                "use a shorter data.seq_len or a larger block_size"
            )
        pos = torch.arange(t, dtype=torch.long, device=idx.device)  # (T,)
        tok_emb = self.transformer.wte(idx)  # (B, T, C)
        pos_emb = self.transformer.wpe(pos)  # (T, C)
        x = self.transformer.drop(tok_emb + pos_emb)  # (B, T, C)
        for i, block in enumerate(self.transformer.h):
            # Checkpointed blocks keep only their input (selective: also their matmul and
            # attention outputs) and recompute the rest in backward.
            x = self.block_fn(block, x, recompute=self._checkpointed(i), selective=self.selective)
        return self.head_fn(
            self.transformer.ln_f, self.lm_head.weight, x, targets, loss_mode=self.loss_mode
        )

    def configure_optimizer(
        self,
        *,
        lr: float,
        weight_decay: float,
        betas: tuple[float, float],
        device_type: str,
        fused: str = "auto",
    ) -> tuple[torch.optim.AdamW, bool]:
        """AdamW with weight decay on matmul/embedding weights (>= 2-D) only, not on biases or
        LayerNorm gains. Returns (optimizer, whether the fused kernel is used).

        fused: "auto" uses the fused (single-kernel) AdamW where this torch build supports it for
        device_type (CUDA, and CPU too since torch 2.4); "true" demands it; "false" uses foreach.
        """
        if fused not in ("auto", "true", "false"):
            raise ValueError(f"optim.fused must be 'auto', 'true' or 'false', got {fused!r}")
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        supported = fused_adamw_supported(device_type)
        if fused == "true" and not supported:
            raise ValueError(
                f"optim.fused='true' but fused AdamW is not supported on device type "
                f"{device_type!r} by torch {torch.__version__} (supported: "
                f"{_fused_devices()}); use optim.fused='auto' or 'false'"
            )
        use_fused = supported and fused != "false"
        opt = torch.optim.AdamW(groups, lr=lr, betas=betas, fused=use_fused or None)
        log.info(
            "AdamW: %d decayed tensors (%d params), %d not decayed (%d params), fused=%s",
            len(decay),
            sum(p.numel() for p in decay),
            len(no_decay),
            sum(p.numel() for p in no_decay),
            use_fused,
        )
        return opt, use_fused


def _fused_devices() -> tuple[str, ...]:
    # torch keeps the list in a private helper; fall back to CUDA-only if it moves.
    try:
        from torch.optim.optimizer import _get_fused_kernels_supported_devices

        return tuple(_get_fused_kernels_supported_devices())
    except ImportError:
        return ("cuda",)


def fused_adamw_supported(device_type: str) -> bool:
    """Whether this torch build has a fused AdamW kernel for `device_type`."""
    return device_type in _fused_devices()


def build_on(device: torch.device, cfg: ModelConfig, **options: Any) -> GPT:
    """A GPT built on the meta device (shapes only) and materialized on `device`: the trainer's
    build (train/run/loop.py build_model); `options` are GPT's keyword options. Seed first."""
    with torch.device("meta"):
        model = GPT(cfg, **options)
    model.materialize(device)
    return model
