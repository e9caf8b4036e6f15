"""float8 training of the transformer blocks' linears through torchao (runtime.float8).

`convert_to_float8` swaps the chosen `nn.Linear`s of a built model for torchao's `Float8Linear`
(`torchao.float8.convert_to_float8_training`), after the model is built and before
torch.compile wraps it: each matmul then casts its input, weight and output gradient to float8
(e4m3 forward, e5m2 gradients) with dynamic scales, per tensor ("tensorwise") or per row
("rowwise"), and runs on the float8 tensor cores at about twice the bf16 rate. Weights, optimizer
state and every other op stay as they were (bf16 autocast over fp32 master weights).

Which linears (`left_out_reason`, pure and table-tested):
- never the LM head: its weight is tied to the token embedding, and the logits feed the loss
  directly; it stays bf16, as torchtitan leaves `output` out;
- only those whose two dimensions are multiples of 16 (torch._scaled_mm requires it);
- only those large enough to gain: torchao 0.18's own thresholds
  (`torchao.float8._auto_filter_for_recipe`, from its H100 benchmarks in torchao/float8/README):
  tensorwise leaves out a layer with in_features <= 4096 and out_features <= 1024; rowwise one
  with out_features <= 2048, or in_features <= 1024, or out <= 4096 and in <= 2048. Below them the
  casts and scale reductions cost more than the faster matmul saves. GPT-2 XL (n_embd 1600):
  tensorwise converts all four block linears, rowwise c_attn and mlp.c_fc only.
- under runtime.float8_emulate the size thresholds do not apply: emulation gains nothing at any
  size, it exists to run the plumbing, so every eligible linear of a tiny CPU model is converted.

Memory: the memory model (train/core/memory_model.py) is left unchanged for float8. torchao's
float8 matmul saves its high-precision input and weight for backward (float8_linear.py:
`ctx.save_for_backward(input_hp, weight_hp_t)`), the same tensors a bf16 linear keeps, and
re-casts them in backward; the float8 copies live only inside one matmul (at GPT-2 XL's micro-batch
16 the largest, mlp.c_proj's input, is 16 x 1024 x 6400 bytes = 100 MiB), well inside the model's
allocator margin.

torchao's import logs "Failed to load ... .so" for kernels built for other GPUs and torch's
pytree warns about an Enum it registers; `import_torchao` keeps those out of the console and logs
them at debug.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torch import nn

log = logging.getLogger(__name__)

# Modules never converted: the tied LM head (and embedding) stays bf16.
EXCLUDED = ("lm_head",)
FP8_ALIGN = 16  # torch._scaled_mm: both matrix dimensions multiples of 16


def left_out_reason(
    fqn: str, *, out_features: int, in_features: int, recipe: str, emulate: bool
) -> str:
    """Why the linear `fqn` of shape (out_features, in_features) is left out, or "" if converted.

    The size thresholds are torchao 0.18's own (see the module docstring); `emulate` skips them.
    """
    if any(fqn == name or fqn.endswith("." + name) for name in EXCLUDED):
        return "tied LM head stays bf16"
    if out_features % FP8_ALIGN or in_features % FP8_ALIGN:
        return f"dimensions not multiples of {FP8_ALIGN}"
    if emulate:
        return ""
    n, k = out_features, in_features
    if recipe == "tensorwise" and k <= 4096 and n <= 1024:
        return "too small to gain (tensorwise: in <= 4096 and out <= 1024)"
    if recipe == "rowwise" and (n <= 2048 or k <= 1024 or (n <= 4096 and k <= 2048)):
        return "too small to gain (rowwise: out <= 2048, in <= 1024, or out <= 4096 and in <= 2048)"
    return ""


@dataclass(kw_only=True)
class Float8Summary:
    """What the conversion did, for the log and the trial result."""

    recipe: str  # tensorwise | rowwise
    emulated: bool
    converted: list[str] = field(default_factory=list)  # fully qualified names
    left_out: dict[str, str] = field(default_factory=dict)  # name -> why


class _ToDebug(logging.Filter):
    """Drops a record from the console and logs its text at debug under this module."""

    def filter(self, record: logging.LogRecord) -> bool:
        log.debug("%s: %s", record.name, record.getMessage())
        return False


@contextlib.contextmanager
def _quiet(*logger_names: str) -> Iterator[None]:
    quiet = _ToDebug()
    loggers = [logging.getLogger(name) for name in logger_names]
    for lg in loggers:
        lg.addFilter(quiet)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(quiet)


def import_torchao() -> Any:
    """`torchao.float8`, imported with its load-time noise sent to the debug log."""
    with _quiet("torchao", "torchao.kernel.intmm", "torch.utils._pytree"):
        import torchao.float8 as float8

    return float8


def plan(model: nn.Module, *, recipe: str, emulate: bool) -> Float8Summary:
    """Which of `model`'s linears `convert_to_float8` would convert, and why the others not."""
    summary = Float8Summary(recipe=recipe, emulated=emulate)
    for fqn, mod in model.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        why = left_out_reason(
            fqn,
            out_features=mod.out_features,
            in_features=mod.in_features,
            recipe=recipe,
            emulate=emulate,
        )
        if why:
            summary.left_out[fqn] = why
        else:
            summary.converted.append(fqn)
    return summary


def convert_to_float8(model: nn.Module, *, recipe: str, emulate: bool) -> Float8Summary:
    """Swap the chosen linears of `model` for torchao's Float8Linear, in place."""
    if recipe not in ("tensorwise", "rowwise"):
        raise ValueError(f"runtime.float8 must be tensorwise or rowwise here, got {recipe!r}")
    summary = plan(model, recipe=recipe, emulate=emulate)
    if not summary.converted:
        log.warning(
            "runtime.float8=%s converts no linear of this model: %s",
            recipe,
            "; ".join(f"{k}: {v}" for k, v in summary.left_out.items()),
        )
        return summary
    ao = import_torchao()
    config = ao.Float8LinearConfig.from_recipe_name(recipe)
    if emulate:
        # the recipe's scaling with emulated float8 matmuls (torchao's Float8LinearConfig.emulate)
        import dataclasses

        config = dataclasses.replace(config, emulate=True)
    chosen = set(summary.converted)
    ao.convert_to_float8_training(
        model, config=config, module_filter_fn=lambda _mod, fqn: fqn in chosen
    )
    log.info(
        "float8 %s%s: %d linears converted, %d left out (%s)",
        recipe,
        " (emulated)" if emulate else "",
        len(summary.converted),
        len(summary.left_out),
        ", ".join(sorted(set(summary.left_out.values()))) or "none",
    )
    return summary


def float8_report(model: nn.Module, runtime: Any) -> dict[str, Any] | None:
    """The trial result's `float8` entry for a built model: the recipe, whether emulated, and the
    linears that run float8 matmuls (counted on the model); None when runtime.float8 is none."""
    if runtime.float8 == "none":
        return None
    linears = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, nn.Linear)]
    converted = [fqn for fqn, m in linears if type(m).__name__ == "Float8Linear"]
    return {
        "recipe": runtime.float8,
        "emulated": bool(runtime.float8_emulate),
        "linears_converted": len(converted),
        "linears_total": len(linears),
    }
