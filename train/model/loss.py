"""The LM head and its cross-entropy: whole (`full`) or a chunk of rows at a time (`chunked`).

`full` is nanoGPT's: logits = lm_head(x), shape (B*T, vocab), then F.cross_entropy. Its memory
grows with micro-batch x vocab: at gpt2-xl's micro-batch 16 the logits, their fp32
log-probabilities and both gradients are ~7.7 GiB (train/core/memory_model.py).

`chunked` (runtime.loss=chunked) never holds those. One autograd Function takes the final hidden
states (N, C), the head's weight (V, C) and the targets, and for each chunk of rows
(train.core.rules.loss_chunk_rows) computes the chunk's logits, its log-sum-exp and loss, and,
while the chunk's logits exist, the gradients the backward pass will need: of the hidden states
(softmax - one-hot) @ W, and of the weight, (softmax - one-hot)^T @ x, summed over chunks in fp32.
So backward only scales what forward stored and recomputes nothing (the way Liger-Kernel's fused
linear cross-entropy works; written here in plain torch, so torch.compile traces it). The
gradients are stored unnormalised (entries in [-1, 1]) and divided by the number of counted
targets in backward, where the loss scale arrives: fp16's small gradients cannot underflow in the
chunk's matmuls.

Under autocast the matmuls run in the autocast dtype and the softmax in fp32, as `full` does.
Targets equal to `ignore_index` (-1, the model's) count for nothing, as in F.cross_entropy.
Equal to `full` within 1e-4 (relative) in fp32 for the loss and every gradient
(tests/train/test_loss_chunked.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from train.core.rules import loss_chunk_rows

IGNORE_INDEX = -1  # targets the loss skips (train/model/gpt.py passes it to both paths)


def full_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (N, V), mean cross-entropy) of hidden states x (N, C) under head weight (V, C)."""
    logits = F.linear(x, weight)  # (N, V)
    return logits, F.cross_entropy(logits, targets, ignore_index=ignore_index)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's where it is on, else x's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of (x @ weight.T) against targets, chunk by chunk (module docstring)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_rows: int,
        ignore_index: int,
    ) -> torch.Tensor:
        dt = _compute_dtype(x)
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]  # type: ignore[attr-defined]
        xc, w = x.to(dt), weight.to(dt)
        valid = targets != ignore_index  # (N,)
        safe_targets = torch.where(valid, targets, 0)
        grad_x = torch.empty_like(xc) if need_x else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        loss_sum = torch.zeros((), dtype=torch.float32, device=x.device)
        with torch.autocast(x.device.type, enabled=False):
            for start in range(0, x.shape[0], chunk_rows):
                rows = slice(start, start + chunk_rows)
                logits = (xc[rows] @ w.t()).float()  # (rows, V): the chunk's, never the whole
                lse = torch.logsumexp(logits, dim=-1)  # (rows,)
                picked = logits.gather(1, safe_targets[rows, None]).squeeze(1)
                keep = valid[rows]
                loss_sum = loss_sum + torch.where(keep, lse - picked, 0.0).sum()
                if grad_x is None and grad_w is None:
                    continue
                # d(loss_sum)/d(logits) = softmax - one-hot, zero on ignored rows
                g = logits.sub_(lse[:, None]).exp_()
                g.scatter_add_(1, safe_targets[rows, None], torch.full_like(picked, -1.0)[:, None])
                g = g.mul_(keep[:, None]).to(dt)  # a copy only under autocast
                if grad_x is not None:
                    grad_x[rows] = g @ w
                if grad_w is not None:
                    grad_w += g.t() @ xc[rows]
                del logits, g  # before the next chunk's logits exist
        n_valid = valid.sum()
        ctx.save_for_backward(grad_x, grad_w, n_valid)
        ctx.x_dtype = x.dtype  # type: ignore[attr-defined]
        return loss_sum / n_valid

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_loss: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        grad_x, grad_w, n_valid = ctx.saved_tensors  # type: ignore[attr-defined]
        scale = grad_loss / n_valid
        gx = grad_x.to(ctx.x_dtype) * scale if grad_x is not None else None  # type: ignore[attr-defined]
        gw = grad_w * scale if grad_w is not None else None
        return gx, gw, None, None, None


def chunked_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    ignore_index: int = IGNORE_INDEX,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of x (N, C) under head weight (V, C), computed in chunks of rows
    (train.core.rules.loss_chunk_rows unless `chunk_rows` is given)."""
    n, c = x.shape
    rows = chunk_rows or loss_chunk_rows(rows=n, n_embd=c, vocab_size=weight.shape[0])
    return ChunkedLinearCrossEntropy.apply(x, weight, targets, rows, ignore_index)
