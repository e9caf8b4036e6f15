"""runtime.activation_checkpointing=selective (train/model/recompute.py): the same loss and
gradients as no checkpointing; the policy keeps the matmul and attention outputs (backward reruns
no matmul) and recomputes the pointwise ops; none | every | every_<k> keep working."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy

from train.core.config import RuntimeConfig
from train.core.rules import is_selective, num_checkpointed_blocks
from train.model.gpt import GPT, ModelConfig, parse_activation_checkpointing
from train.model.recompute import SAVED_OPS, selective_policy

SMALL = dict(name="t", n_layer=3, n_head=2, n_embd=32, block_size=16, vocab_size=128)
aten = torch.ops.aten


class OpCounter(TorchDispatchMode):
    """How many times each aten op runs while active."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def step(ac: str, *, attention: str = "auto", n_layer: int = 3) -> tuple[float, dict, Counter]:
    """Loss, gradients and the ops run in backward of one step of a seeded model."""
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(**{**SMALL, "n_layer": n_layer}),
        activation_checkpointing=ac,
        attention=attention,
    )
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 128, (2, 16), generator=g)
    targets = torch.randint(0, 128, (2, 16), generator=g)
    _, loss = model(idx, targets)
    with OpCounter() as ops:
        loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}, ops.counts


@pytest.mark.parametrize("attention", ["auto", "math"])
@pytest.mark.parametrize("ac", ["selective", "every", "every_2"])
def test_recompute_gives_the_same_loss_and_gradients_as_none(ac, attention) -> None:
    ref_loss, ref_grads, _ = step("none", attention=attention)
    loss, grads, _ = step(ac, attention=attention)
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-5, atol=1e-7)


def test_selective_reruns_the_pointwise_ops_and_no_matmul() -> None:
    n = 3
    _, _, none = step("none", n_layer=n)
    _, _, selective = step("selective", n_layer=n)
    _, _, every = step("every", n_layer=n)
    # backward of an unchekpointed model runs no forward op again
    assert none["gelu"] == none["native_layer_norm"] == none["addmm"] == 0
    # selective: each block's GELU and two LayerNorms again, but no matmul and no attention
    assert selective["gelu"] == n and selective["native_layer_norm"] == 2 * n
    assert selective["addmm"] == 0
    assert selective["_scaled_dot_product_flash_attention_for_cpu"] == 0
    # whole-block checkpointing reruns the matmuls and the attention kernel too
    assert every["addmm"] >= 3 * n and every["_scaled_dot_product_flash_attention_for_cpu"] == n
    # the gradients' own matmuls are the same in all three
    assert selective["mm"] == none["mm"] == every["mm"]


@pytest.mark.parametrize(
    ("op", "policy"),
    [
        (aten.mm.default, CheckpointPolicy.MUST_SAVE),
        (aten.addmm.default, CheckpointPolicy.MUST_SAVE),
        (aten.bmm.default, CheckpointPolicy.MUST_SAVE),
        (aten._scaled_dot_product_flash_attention.default, CheckpointPolicy.MUST_SAVE),
        (aten._scaled_dot_product_efficient_attention.default, CheckpointPolicy.MUST_SAVE),
        (aten._scaled_dot_product_cudnn_attention.default, CheckpointPolicy.MUST_SAVE),
        (aten._scaled_dot_product_flash_attention_for_cpu.default, CheckpointPolicy.MUST_SAVE),
        (aten.gelu.default, CheckpointPolicy.PREFER_RECOMPUTE),
        (aten.native_layer_norm.default, CheckpointPolicy.PREFER_RECOMPUTE),
        (aten.add.Tensor, CheckpointPolicy.PREFER_RECOMPUTE),
        (aten._to_copy.default, CheckpointPolicy.PREFER_RECOMPUTE),
    ],
)
def test_the_policy_keeps_matmuls_and_attention(op, policy) -> None:
    assert selective_policy(None, op) == policy
    assert (op in SAVED_OPS) == (policy == CheckpointPolicy.MUST_SAVE)


@pytest.mark.parametrize(
    ("value", "k", "selective", "blocks"),
    [
        ("none", 0, False, 0),
        ("every", 1, False, 48),
        ("every_2", 2, False, 24),
        ("every_3", 3, False, 16),
        ("selective", 1, True, 48),
    ],
)
def test_the_modes_parse(value, k, selective, blocks) -> None:
    assert parse_activation_checkpointing(value) == k
    assert is_selective(value) is selective
    assert num_checkpointed_blocks(48, value) == blocks
    assert RuntimeConfig(activation_checkpointing=value).activation_checkpointing == value


def test_an_unknown_mode_is_refused_naming_selective() -> None:
    with pytest.raises(ValueError, match=r"activation_checkpointing must be .*'selective'"):
        RuntimeConfig(activation_checkpointing="op_level")


def test_selective_is_off_in_eval() -> None:
    model = GPT(ModelConfig(**SMALL), activation_checkpointing="selective").eval()
    idx = torch.randint(0, 128, (1, 16))
    with OpCounter() as ops:
        model(idx, idx)
    assert model.selective and ops.counts["addmm"] > 0  # it ran, with no checkpoint around it
