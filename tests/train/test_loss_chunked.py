"""runtime.loss=chunked (train/model/loss.py): the same loss and gradients as the full loss, in
fp32 within rtol 1e-4, on the tiny and small-cpu shapes at GPT-2's padded vocabulary, with ignored
targets, eagerly and under torch.compile; and the chunk rule (train/core/rules.py)."""

from __future__ import annotations

import pytest
import torch

from train.core.config import ModelConfig, RuntimeConfig
from train.core.rules import LOSS_MODES, loss_chunk_rows
from train.model.gpt import GPT
from train.model.loss import IGNORE_INDEX, chunked_cross_entropy, full_cross_entropy

VOCAB = 50304
RTOL = 1e-4
# conf/model/tiny.yaml and conf/model/small-cpu.yaml at vocab 50304
SHAPES = {
    "tiny": dict(name="tiny", n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=VOCAB),
    "small-cpu": dict(
        name="small-cpu", n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=VOCAB
    ),
}


def close(got: torch.Tensor, ref: torch.Tensor) -> None:
    """Equal within RTOL of the reference, elementwise, with the tensor's own scale as the
    absolute floor (a gradient entry of exactly 0 cannot be matched relatively)."""
    got, ref = got.detach(), ref.detach()
    torch.testing.assert_close(got, ref, rtol=RTOL, atol=RTOL * float(ref.abs().max()))


def targets_with_ignored(b: int, t: int, *, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, VOCAB, (b, t), generator=g)
    targets = torch.randint(0, VOCAB, (b, t), generator=g)
    targets[:, ::5] = IGNORE_INDEX  # every fifth position counts for nothing
    targets[0, -7:] = IGNORE_INDEX  # and a padded-looking tail
    return idx, targets


def loss_and_grads(
    cfg: ModelConfig,
    loss: str,
    idx,
    targets,
    *,
    compiled: bool = False,
    activation_checkpointing: str = "none",
) -> tuple[torch.Tensor, dict]:
    torch.manual_seed(0)
    model = GPT(cfg, loss=loss, activation_checkpointing=activation_checkpointing)
    run = torch.compile(model) if compiled else model
    _, value = run(idx, targets)
    value.backward()
    return value.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


# ---- the function ------------------------------------------------------------------------------


@pytest.mark.parametrize("n_embd", [64, 128])
@pytest.mark.parametrize("chunk_rows", [None, 128, 96, 1000])
def test_the_function_equals_the_full_loss_and_its_gradients(n_embd, chunk_rows) -> None:
    torch.manual_seed(0)
    x = torch.randn(300, n_embd, requires_grad=True)
    w = (0.02 * torch.randn(VOCAB, n_embd)).requires_grad_()
    _, targets = targets_with_ignored(1, 300)
    targets = targets.view(-1)
    _, ref = full_cross_entropy(x, w, targets)
    ref_x, ref_w = torch.autograd.grad(ref, (x, w))
    got = chunked_cross_entropy(x, w, targets, chunk_rows=chunk_rows)
    got_x, got_w = torch.autograd.grad(got, (x, w))
    close(got, ref)
    close(got_x, ref_x)
    close(got_w, ref_w)


def test_ignored_rows_get_no_gradient_and_the_loss_scale_reaches_both_gradients() -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 64, requires_grad=True)
    w = (0.02 * torch.randn(VOCAB, 64)).requires_grad_()
    targets = torch.randint(0, VOCAB, (256,))
    targets[100:] = IGNORE_INDEX
    got = chunked_cross_entropy(x, w, targets, chunk_rows=64)
    (3.0 * got).backward()
    assert torch.count_nonzero(x.grad[100:]) == 0
    _, ref = full_cross_entropy(x, w, targets)
    ref_x, ref_w = torch.autograd.grad(3.0 * ref, (x, w))
    close(x.grad, ref_x)
    close(w.grad, ref_w)


def test_without_grad_it_computes_the_loss_only() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(200, 64), 0.02 * torch.randn(VOCAB, 64)
    _, targets = targets_with_ignored(1, 200)
    with torch.no_grad():
        got = chunked_cross_entropy(x, w, targets.view(-1), chunk_rows=64)
        _, ref = full_cross_entropy(x, w, targets.view(-1))
    close(got, ref)


def test_under_bf16_autocast_it_matches_the_full_loss_to_bf16_precision() -> None:
    torch.manual_seed(0)
    x = torch.randn(256, 64, requires_grad=True)
    w = (0.02 * torch.randn(VOCAB, 64)).requires_grad_()
    _, targets = targets_with_ignored(1, 256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, ref = full_cross_entropy(x, w, targets.view(-1))
        got = chunked_cross_entropy(x, w, targets.view(-1), chunk_rows=64)
    torch.testing.assert_close(got, ref, rtol=1e-3, atol=0)
    gx, gw = torch.autograd.grad(got, (x, w))
    rx, rw = torch.autograd.grad(ref, (x, w))
    assert gx.dtype == x.dtype and gw.dtype == w.dtype
    torch.testing.assert_close(gx, rx, rtol=0.05, atol=0.02 * float(rx.abs().max()))
    torch.testing.assert_close(gw, rw, rtol=0.05, atol=0.02 * float(rw.abs().max()))


# ---- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["tiny", "small-cpu"])
def test_the_model_trains_the_same_loss_and_gradients_either_way(model) -> None:
    cfg = ModelConfig(**SHAPES[model])
    idx, targets = targets_with_ignored(4, cfg.block_size)
    ref, ref_grads = loss_and_grads(cfg, "full", idx, targets)
    got, grads = loss_and_grads(cfg, "chunked", idx, targets)
    close(got, ref)
    assert grads.keys() == ref_grads.keys()
    for name, grad in grads.items():
        close(grad, ref_grads[name])


def test_compiled_chunked_loss_with_selective_recompute_equals_eager_full() -> None:
    # One compile (about a minute on this CPU) for both levers of issue 22 at once.
    cfg = ModelConfig(**SHAPES["tiny"])
    idx, targets = targets_with_ignored(2, cfg.block_size)
    ref, ref_grads = loss_and_grads(cfg, "full", idx, targets)
    got, grads = loss_and_grads(
        cfg, "chunked", idx, targets, compiled=True, activation_checkpointing="selective"
    )
    close(got, ref)
    for name, grad in grads.items():
        close(grad, ref_grads[name])


def test_chunked_returns_no_logits_and_full_and_generation_do() -> None:
    cfg = ModelConfig(**SHAPES["tiny"])
    idx, targets = targets_with_ignored(2, 16)
    model = GPT(cfg, loss="chunked")
    logits, value = model(idx, targets)
    assert logits is None and value.ndim == 0
    logits, value = model(idx)  # no targets: the logits, for sampling
    assert logits.shape == (2, 16, VOCAB) and value is None
    logits, _ = GPT(cfg)(idx, targets)
    assert logits.shape == (2, 16, VOCAB)


# ---- the rule and the schema -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "n_embd", "vocab", "chunk"),
    [
        (16 * 1024, 1600, 50304, 1024),  # gpt2-xl mb16: logits chunk ~ hidden states, 16 chunks
        (4 * 1024, 1600, 50304, 256),  # gpt2-xl mb4
        (16 * 1024, 768, 50304, 512),  # gpt2 mb16
        (1024, 128, 50304, 128),  # small-cpu mb16: the 128-row floor, 8 chunks
        (64 * 1024, 128, 50304, 2048),  # at most 32 chunks
        (100, 64, 50304, 100),  # fewer rows than the floor: one chunk
    ],
)
def test_loss_chunk_rows(rows, n_embd, vocab, chunk) -> None:
    assert loss_chunk_rows(rows=rows, n_embd=n_embd, vocab_size=vocab) == chunk


def test_runtime_loss_is_validated_naming_the_key() -> None:
    assert LOSS_MODES == ("full", "chunked")
    assert RuntimeConfig(loss="chunked").loss == "chunked"
    with pytest.raises(ValueError, match=r"runtime\.loss must be one of \('full', 'chunked'\)"):
        RuntimeConfig(loss="fused")
    with pytest.raises(ValueError, match=r"runtime\.loss"):
        GPT(ModelConfig(**SHAPES["tiny"]), loss="chunky")
