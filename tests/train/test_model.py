import math

import pytest
import torch
import torch.nn.functional as F

from train.core.flops import gpt2_num_params
from train.model.attention import BACKENDS, probe_backend, sdpa_context
from train.model.gpt import GPT, ModelConfig, fused_adamw_supported, parse_activation_checkpointing

# Small vocab keeps these CPU tests in milliseconds; the 50304 default is tested where it matters.
SMALL = dict(name="t", n_layer=4, n_head=2, n_embd=32, block_size=16, vocab_size=128)


def small_model(**overrides: object) -> GPT:
    torch.manual_seed(0)
    ac = overrides.pop("activation_checkpointing", "none")
    return GPT(ModelConfig(**{**SMALL, **overrides}), activation_checkpointing=ac)


def batch(cfg: ModelConfig, b: int = 3, t: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    t = t or cfg.block_size
    idx = torch.randint(0, cfg.vocab_size, (b, t), generator=g)
    return idx, torch.randint(0, cfg.vocab_size, (b, t), generator=g)


# ---- config -----------------------------------------------------------------------------------


def test_default_config_is_tiny_preset() -> None:
    cfg = ModelConfig()
    assert (cfg.name, cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.vocab_size) == (
        "tiny",
        2,
        2,
        64,
        64,
        4096,
    )


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            dict(n_embd=1600, n_head=26),
            r"model\.n_embd \(1600\) must be divisible by model\.n_head \(26\)",
        ),
        (dict(n_layer=0), r"model\.n_layer must be a positive integer, got 0"),
        (dict(n_head=-2), r"model\.n_head must be a positive integer"),
        (dict(block_size=0), r"model\.block_size"),
        (dict(vocab_size=0), r"model\.vocab_size"),
        (dict(dropout=1.0), r"model\.dropout must be in \[0, 1\)"),
        (dict(dropout=-0.1), r"model\.dropout"),
    ],
)
def test_config_validation(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ModelConfig(**overrides)


@pytest.mark.parametrize(
    ("s", "k"), [("none", 0), ("every", 1), ("every_1", 1), ("every_2", 2), ("every_12", 12)]
)
def test_parse_activation_checkpointing(s: str, k: int) -> None:
    assert parse_activation_checkpointing(s) == k


@pytest.mark.parametrize("s", ["", "all", "every_0", "every_", "every_-1", "every2", "EVERY"])
def test_parse_activation_checkpointing_rejects(s: str) -> None:
    match = r"runtime\.activation_checkpointing must be 'none', 'every'"
    with pytest.raises(ValueError, match=match):
        parse_activation_checkpointing(s)


def test_gpt_rejects_bad_checkpointing_string() -> None:
    with pytest.raises(ValueError, match="every_<k>"):
        GPT(ModelConfig(**SMALL), activation_checkpointing="sometimes")


# ---- model ------------------------------------------------------------------------------------


def test_forward_shapes_and_tied_weights() -> None:
    model = small_model()
    idx, targets = batch(model.config, b=3, t=10)
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 10, 128)
    assert loss is not None and loss.shape == ()
    logits, loss = model(idx)
    assert logits.shape == (3, 10, 128) and loss is None
    assert model.lm_head.weight is model.transformer.wte.weight


def test_state_dict_uses_gpt2_names() -> None:
    keys = set(small_model().state_dict())
    for k in (
        "transformer.wte.weight",
        "transformer.wpe.weight",
        "transformer.h.0.ln_1.weight",
        "transformer.h.0.attn.c_attn.weight",
        "transformer.h.0.attn.c_proj.bias",
        "transformer.h.0.mlp.c_fc.weight",
        "transformer.h.3.mlp.c_proj.weight",
        "transformer.ln_f.bias",
        "lm_head.weight",
    ):
        assert k in keys


def test_gpt2_init_scales_residual_projections() -> None:
    model = small_model(n_embd=64, n_layer=8, vocab_size=256)
    c_proj = torch.cat([b.attn.c_proj.weight.flatten() for b in model.transformer.h])
    c_fc = torch.cat([b.mlp.c_fc.weight.flatten() for b in model.transformer.h])
    assert c_fc.std().item() == pytest.approx(0.02, rel=0.05)
    assert c_proj.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
    assert torch.all(model.transformer.h[0].attn.c_attn.bias == 0)


def test_initial_loss_is_ln_vocab() -> None:
    # Full GPT-2 vocab: at init the logits are near zero, so the loss is ~ln(50304) = 10.83.
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=50304))
    idx, targets = batch(model.config, b=2, t=16)
    with torch.no_grad():
        _, loss = model(idx, targets)
    assert loss is not None
    assert loss.item() == pytest.approx(math.log(50304), abs=0.05)


def test_sequence_longer_than_block_size_raises() -> None:
    model = small_model()
    idx = torch.zeros(1, 17, dtype=torch.long)
    with pytest.raises(ValueError, match=r"sequence length 17 exceeds model\.block_size 16"):
        model(idx)


@pytest.mark.parametrize("bias", [True, False])
def test_num_params_matches_formula(bias: bool) -> None:
    model = small_model(bias=bias)
    cfg = model.config
    for exclude in (True, False):
        assert model.num_params(exclude_position_embedding=exclude) == gpt2_num_params(
            n_layer=cfg.n_layer,
            n_embd=cfg.n_embd,
            vocab_size=cfg.vocab_size,
            block_size=cfg.block_size,
            bias=bias,
            exclude_position_embedding=exclude,
        )
    assert model.num_params(exclude_position_embedding=False) - model.num_params() == 16 * 32


def _loss_and_grads(ac: str, dropout: float) -> tuple[float, dict[str, torch.Tensor], list[int]]:
    model = small_model(activation_checkpointing=ac, dropout=dropout)
    model.train()
    calls = [0] * len(model.transformer.h)
    for i, block in enumerate(model.transformer.h):
        block.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    idx, targets = batch(model.config)
    torch.manual_seed(123)  # same dropout masks in every variant
    _, loss = model(idx, targets)
    assert loss is not None
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads, calls


@pytest.mark.parametrize(
    ("ac", "expected_calls"),
    [("every", [2, 2, 2, 2]), ("every_2", [1, 2, 1, 2]), ("every_3", [1, 1, 2, 1])],
)
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_activation_checkpointing_same_loss_and_grads(
    ac: str, expected_calls: list[int], dropout: float
) -> None:
    ref_loss, ref_grads, ref_calls = _loss_and_grads("none", dropout)
    loss, grads, calls = _loss_and_grads(ac, dropout)
    assert ref_calls == [1, 1, 1, 1]
    # Checkpointed blocks run their forward again during backward.
    assert calls == expected_calls
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-5, atol=1e-7, msg=name)


def test_activation_checkpointing_off_in_eval() -> None:
    model = small_model(activation_checkpointing="every").eval()
    calls = [0]
    model.transformer.h[0].register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    idx, targets = batch(model.config)
    _, loss = model(idx, targets)
    assert loss is not None
    loss.backward()
    assert calls == [1]


# ---- optimizer --------------------------------------------------------------------------------


def test_optimizer_decay_groups() -> None:
    model = small_model()
    opt, _ = model.configure_optimizer(
        lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu", fused="false"
    )
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    # Tied wte/lm_head appears once; every parameter is in exactly one group.
    n_opt = sum(p.numel() for g in opt.param_groups for p in g["params"])
    assert n_opt == model.num_params(exclude_position_embedding=False)
    assert opt.defaults["betas"] == (0.9, 0.95)


@pytest.mark.parametrize(
    ("fused", "device_type", "expected"),
    [
        # torch >= 2.4 ships a fused CPU AdamW; measured ~5 ms vs ~50 ms (foreach) per step for a
        # 7M-param model on the 2-core dev box, so "auto" takes it on CPU too.
        ("auto", "cpu", fused_adamw_supported("cpu")),
        ("true", "cpu", True),
        ("false", "cpu", False),
        ("auto", "meta", False),
    ],
)
def test_fused_optimizer_choice(fused: str, device_type: str, expected: bool) -> None:
    model = small_model()
    opt, used = model.configure_optimizer(
        lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type=device_type, fused=fused
    )
    assert used is expected
    assert bool(opt.defaults["fused"]) is expected
    if device_type == "cpu":  # the chosen implementation really steps
        idx, targets = batch(model.config)
        _, loss = model(idx, targets)
        assert loss is not None
        loss.backward()
        before = model.lm_head.weight.detach().clone()
        opt.step()
        assert not torch.equal(before, model.lm_head.weight)


def test_fused_cpu_supported_on_this_torch() -> None:
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert fused_adamw_supported("cpu") is ((major, minor) >= (2, 4))


def test_fused_true_unsupported_device_raises() -> None:
    with pytest.raises(ValueError, match=r"optim\.fused='true'.*'meta'"):
        small_model().configure_optimizer(
            lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type="meta", fused="true"
        )


def test_fused_bad_string_raises() -> None:
    with pytest.raises(ValueError, match=r"optim\.fused must be"):
        small_model().configure_optimizer(
            lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type="cpu", fused="yes"
        )


# ---- attention backends -----------------------------------------------------------------------


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 2, 8, 16, generator=g) for _ in range(3))  # type: ignore[return-value]


@pytest.mark.parametrize("name", ["efficient", "cudnn"])
def test_sdpa_context_unavailable_backend_raises_on_cpu(name: str) -> None:
    q, k, v = _qkv()
    with sdpa_context(name), pytest.raises(RuntimeError, match="No viable backend"):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("name", ["auto", "flash", "math"])
def test_sdpa_context_available_backends_agree(name: str) -> None:
    q, k, v = _qkv()
    with sdpa_context("math"):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with sdpa_context(name):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_sdpa_context_unknown_name() -> None:
    with pytest.raises(ValueError, match=r"runtime\.attention must be one of .*'flashy'"):
        sdpa_context("flashy")


PROBE = dict(device="cpu", dtype=torch.float32, batch=1, n_head=2, seq_len=16, head_dim=8)


@pytest.mark.parametrize(("name", "expected"), [("math", "math"), ("flash", "flash")])
def test_probe_backend_named_on_cpu(name: str, expected: str) -> None:
    assert probe_backend(name, **PROBE) == expected


def test_probe_backend_auto_on_cpu() -> None:
    used = probe_backend("auto", **PROBE)
    assert used in BACKENDS and used != "auto"


def test_probe_backend_unavailable_names_reason_and_alternatives() -> None:
    with pytest.raises(ValueError) as err:
        probe_backend("efficient", **PROBE)
    msg = str(err.value)
    assert "'efficient' cannot run on cpu" in msg
    assert "No viable backend" in msg
    assert "Backends that run here: ['flash', 'math']" in msg


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_probe_backend_cuda_bf16() -> None:
    kw = dict(device="cuda", dtype=torch.bfloat16, batch=2, n_head=12, seq_len=1024, head_dim=64)
    assert probe_backend("flash", **kw) == "flash"
    assert probe_backend("math", **kw) == "math"
    assert probe_backend("auto", **kw) in ("flash", "efficient", "cudnn")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_probe_backend_cuda_flash_rejects_fp32() -> None:
    kw = dict(device="cuda", dtype=torch.float32, batch=1, n_head=2, seq_len=64, head_dim=64)
    with pytest.raises(ValueError, match=r"(?s)'flash' cannot run on cuda.*Backends that run here"):
        probe_backend("flash", **kw)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_optimizer_auto_on_cuda() -> None:
    model = small_model().cuda()
    _, used = model.configure_optimizer(
        lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device_type="cuda", fused="auto"
    )
    assert used is True


@pytest.mark.parametrize("attention", ["math", "flash"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_checkpointed_blocks_recompute_on_the_chosen_attention_kernel(attention, dtype):
    """The recompute of a checkpointed block runs in backward, outside the caller's contexts; the
    model applies its SDPA choice itself, so forward and recompute use the same kernel (a math
    forward with an auto recompute raised torch.utils.checkpoint's CheckpointError)."""
    cfg = ModelConfig(**SMALL)
    grads = []
    for ac in ("every", "none"):
        torch.manual_seed(0)
        model = GPT(cfg, activation_checkpointing=ac, attention=attention)
        idx, targets = batch(cfg)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            _, loss = model(idx, targets)
        loss.backward()
        grads.append(model.transformer.h[0].attn.c_attn.weight.grad.clone())
    # recomputation reproduces the forward: the same gradients as storing the activations
    torch.testing.assert_close(grads[0], grads[1])


# ---- built on the meta device, drawn on the real one --------------------------------------------


def _meta_built(seed: int, **overrides: object) -> GPT:
    torch.manual_seed(seed)
    with torch.device("meta"):
        model = GPT(ModelConfig(**{**SMALL, **overrides}))
    model.materialize(torch.device("cpu"))
    return model


def test_a_meta_built_model_has_real_tied_weights_with_gpt2s_init() -> None:
    model = _meta_built(0, n_embd=64, vocab_size=512)
    params = dict(model.named_parameters())
    assert all(p.device.type == "cpu" and torch.isfinite(p).all() for p in params.values())
    assert model.transformer.wte.weight is model.lm_head.weight  # tied again after to_empty
    assert model.num_params() == small_model(n_embd=64, vocab_size=512).num_params()
    # GPT-2's init, not torch's defaults and not to_empty's garbage
    assert abs(model.lm_head.weight.std().item() - 0.02) < 0.002
    c_proj = model.transformer.h[0].attn.c_proj.weight
    assert abs(c_proj.std().item() - 0.02 / math.sqrt(2 * SMALL["n_layer"])) < 0.002
    assert torch.count_nonzero(model.transformer.ln_f.bias) == 0
    assert torch.all(model.transformer.ln_f.weight == 1)


def test_a_meta_built_model_is_seeded_and_trains() -> None:
    a, b, c = _meta_built(3), _meta_built(3), _meta_built(4)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    idx, targets = batch(a.config)
    _, loss = a(idx, targets)
    loss.backward()
    grad = a.lm_head.weight.grad
    assert grad is not None and a.transformer.wte.weight.grad is grad  # one tied gradient
    assert math.isfinite(loss.item()) and abs(loss.item() - math.log(SMALL["vocab_size"])) < 0.5
