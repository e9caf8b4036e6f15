"""Every sentence about a gap: what the target runs instead, what the sweep measured that to be
worth, and the "what <target> cannot express" lines of the handoff files and the sweep's report.

The gaps are data (train/core/handoff/gaps.py: a kind per sentence, the numbers it names); this
module is the one place their words live. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from train.core.handoff.gaps import Gap, GapKind, Worth, value_text

NOT_MEASURED = "not measured"

# What each target runs instead, by kind. Fields: {value} (the winner's value), {upper} (it in
# capitals), {instead} (the first value the target runs), and the gap's numbers.
WHY: dict[str, dict[GapKind, str]] = {
    "nanoGPT": {
        "compile_default_mode": "nanoGPT compiles in torch.compile's default mode only "
        "(compile = True)",
        "compile_whole_model": "nanoGPT compiles the whole model (model = torch.compile(model)), "
        "not each block once: its cold compile grows with the depth",
        "keeps_activations": "nanoGPT has no activation checkpointing: it keeps every activation "
        "(more memory; it may not fit)",
        "full_logits": "nanoGPT computes the whole (B, T, vocab) logits and their cross-entropy "
        "at once (more memory; it may not fit)",
        "no_flash_impl": "nanoGPT activates no flash implementation ({upper}): its SDPA runs "
        "PyTorch's default kernels",
        "sdpa_picks": "nanoGPT calls SDPA and lets PyTorch pick the kernel",
        "bf16_matmuls": "nanoGPT has no float8 training: its linears run bf16 matmuls (about half "
        "the float8 rate; the bf16 math the numerics guard compared)",
        "tf32_on": "nanoGPT turns TF32 on for matmuls and cuDNN",
        "fixed_seed": "nanoGPT seeds {instead} + rank",
        "in_process_data": "nanoGPT reads each batch in the training process (get_batch), so no "
        "workers and no prefetch",
        "pinned_batches": "nanoGPT always pins batches on CUDA",
        "sync_save": "nanoGPT saves with torch.save inside the step (synchronous)",
        "one_checkpoint": "nanoGPT overwrites one ckpt.pt",
        "fused_adamw": "nanoGPT uses fused AdamW wherever CUDA has it",
        "ddp_default": "nanoGPT wraps DDP with its default ({default})",
        "saves_on_improvement": "nanoGPT cannot turn saving off: it still saves when the "
        "validation loss improves (always_save_checkpoint = False)",
        "eval_at_save": "nanoGPT evaluates at each save (eval_interval = {instead}): validation "
        "and saving share one interval",
    },
    "llm.c": {
        "no_torch_compile": "llm.c has no torch.compile{whole}: its own CUDA kernels run",
        "recompute_no_policy": "llm.c has no op-level policy: its -r 2 recomputes GELU and "
        "LayerNorm and keeps the other outputs",
        "recompute_gelu_layernorm": "llm.c recomputes GELU and LayerNorm (-r 2), not whole blocks",
        "full_logits": "llm.c's fused classifier holds the whole (B, T, vocab) logits in bf16 and "
        "writes their gradient in place: no chunked loss",
        "cudnn_or_own_attention": "llm.c runs cuDNN attention (built with USE_CUDNN=1) or its own "
        "kernel",
        "bf16_matmuls": "llm.c's train_gpt2cu has no float8 training: its matmuls run bf16 on "
        "cuBLASLt (about half the float8 rate)",
        "in_process_data": "llm.c's DataLoader reads shards in the training process",
        "pinned_batches": "llm.c stages batches in pinned host memory",
        "sync_save": "llm.c writes checkpoints inside the step",
        "fused_adamw": "llm.c's AdamW is one fused kernel",
        "own_nccl": "llm.c reduces gradients with its own NCCL calls, not DDP",
        "cuda_only": "train_gpt2cu runs on CUDA only: this speed was measured on a CPU and says "
        "nothing about a GPU",
    },
}


def why_text(gap: Gap) -> str:
    """What the target runs instead of the winner's value, in a few words."""
    fields: dict[str, Any] = {
        "value": value_text(gap.value),
        "upper": str(gap.value).upper(),
        "instead": gap.instead[0] if gap.instead else "",
        "default": gap.instead[0] if gap.instead else "",
        "whole": "",
        **gap.numbers,
    }
    if gap.numbers.get("compile_unit", "model") != "model":
        fields["whole"] = " (whole or block by block)"
    return WHY[gap.target][gap.kind].format(**fields)


def worth_text(gap: Gap) -> str:
    """What the sweep measured the gap to be worth, or why it was not measured."""
    w: Worth = gap.worth
    if w.kind == "unread":
        return f"{NOT_MEASURED} ({w.reachable or 'the study was not read'})"
    if w.kind == "winner_missing":
        return f"{NOT_MEASURED} (the winner's trial is not in the study)"
    if w.kind == "not_searched":
        return f"{NOT_MEASURED} (the sweep did not search {gap.key})"
    if w.kind == "no_twin" or w.twin is None:
        wanted = " or ".join(value_text(v) for v in gap.instead) or "an equivalent"
        return f"{NOT_MEASURED} (no trial ran {gap.key}={wanted} with the winner's other knobs)"
    twin = w.twin
    return (
        f"measured: the winner ran {w.winner_tokens_per_s / twin.tokens_per_s:.2f}x the tokens/s "
        f"of trial {twin.number} ({gap.key}={value_text(twin.params[gap.key])}: "
        f"{twin.tokens_per_s:,.0f} vs {w.winner_tokens_per_s:,.0f} tokens/s)"
    )


def gap_line(gap: Gap) -> str:
    """One cannot-express line: the key and the winner's value, what runs instead, its worth."""
    return f"{gap.key}={value_text(gap.value)}: {why_text(gap)}; {worth_text(gap)}"


def file_lines(target: str, lines: Sequence[str]) -> list[str]:
    """The handoff file's cannot-express block (comment lines), `lines` from `gap_line` and the
    target's own (nanoGPT's vocabulary)."""
    if not lines:
        return [f"What {target} cannot express: nothing; every knob of the winner maps."]
    head = f"What {target} cannot express (what the sweep measured it to be worth):"
    return [head, *(f"  - {line}" for line in lines)]


def report_lines(file_name: str, target: str, lines: Sequence[str]) -> list[str]:
    """The sweep report's lines for one written handoff file and what its target cannot express."""
    head = f"{file_name}: what {target} cannot express:" + ("" if lines else " nothing")
    return [head, *(f"  - {line}" for line in lines)]


def comment_lines(lines: Iterable[str]) -> str:
    """`lines` as `# ` comments of a Python or shell file. A value in a line (a data folder, a
    checkpoint path) comes from a best.yaml someone may have handed over: every character that is
    not printable (a newline above all, which would end the comment and make the rest live code
    in a file nanoGPT exec()s or bash runs) is written escaped, as Python's repr writes it."""
    out = []
    for line in lines:
        safe = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(line))
        out.append(f"# {safe}".rstrip() + "\n")
    return "".join(out)
