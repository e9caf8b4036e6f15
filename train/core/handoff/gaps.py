"""What a target trainer cannot express of the winner, and what the sweep measured that to be worth.

A `Gap` is one knob of best.yaml that the target has no setting for (nanoGPT has one compile mode,
llm.c hard-codes its AdamW betas): the target runs `instead` (a value of the same knob, where one
exists), so the export still trains the same batch and model, only slower or faster. A
`HandoffRefused` is a value the target would change the science of (the precision, the tokens per
step, the model): that export is refused, naming the key.

The price of a gap comes from the study: the winner's search run against the best trial that ran
every other searched knob as the winner did and this knob at a value the target runs. Both ran in
the same conditions (the search), so their ratio is the measured worth; with no such trial it is
not measured. Pure: plain dicts and `SearchRun`s in, typed gaps out; every sentence about a gap
is written by train/core/handoff/gaps_text.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from train.core.evidence import SearchRun
from train.core.rules import resolve_dtype_name

# Searched knobs that never change a step's speed: a trial that differs from the winner only in
# these still measures the other knobs at the winner's settings.
SPEED_NEUTRAL_PREFIXES = (
    "optim.lr",
    "optim.min_lr",
    "optim.warmup_steps",
    "optim.weight_decay",
    "optim.beta",
    "optim.grad_clip",
)


# What the target runs instead, one kind per sentence of train/core/handoff/gaps_text.py (a kind
# both targets share is said in each target's words).
GapKind = Literal[
    "compile_default_mode",  # nanoGPT: torch.compile's default mode only
    "compile_whole_model",  # nanoGPT: the whole model, not block by block
    "no_torch_compile",  # llm.c: its own kernels (numbers: compile_unit)
    "keeps_activations",  # nanoGPT: no activation checkpointing
    "recompute_gelu_layernorm",  # llm.c: -r 2, not whole blocks
    "recompute_no_policy",  # llm.c: -r 2 for a selective (op-level) policy
    "full_logits",  # the whole (B, T, vocab) logits at once: no chunked loss
    "no_flash_impl",  # nanoGPT: PyTorch's default SDPA kernels, not the winner's flash one
    "sdpa_picks",  # nanoGPT: SDPA picks the kernel
    "cudnn_or_own_attention",  # llm.c: cuDNN attention or its own kernel
    "bf16_matmuls",  # no float8 training
    "tf32_on",  # nanoGPT: TF32 always on
    "fixed_seed",  # nanoGPT: 1337 + rank
    "in_process_data",  # batches read in the training process
    "pinned_batches",  # batches always pinned
    "sync_save",  # checkpoints written inside the step
    "one_checkpoint",  # nanoGPT: one ckpt.pt overwritten
    "fused_adamw",  # a fused AdamW always
    "ddp_default",  # nanoGPT: DDP's default for this knob
    "own_nccl",  # llm.c: its own NCCL calls, no DDP
    "saves_on_improvement",  # nanoGPT: saving cannot be turned off
    "eval_at_save",  # nanoGPT: validation and saving share one interval
    "cuda_only",  # llm.c: CUDA only, the winner measured on a CPU
]
# How far the study priced a gap (`priced`).
WorthKind = Literal[
    "unread",  # the study was not read (`reachable` says why)
    "winner_missing",  # the winner's trial is not in the study
    "not_searched",  # the sweep did not search the gap's key
    "no_twin",  # no trial ran the key at a value the target runs with the winner's other knobs
    "measured",  # `twin` ran it: the winner's tokens/s over the twin's
]


@dataclass(frozen=True, kw_only=True)
class Worth:
    """What the sweep measured a gap to be worth, or how far it got."""

    kind: WorthKind
    reachable: str = ""  # unread: why the study was not read ("" where the caller gave no reason)
    twin: SearchRun | None = None  # measured: the fastest trial that ran what the target runs
    winner_tokens_per_s: float = 0.0  # measured: the winner's search run


@dataclass(frozen=True, kw_only=True)
class Gap:
    """One knob of the winner the target has no setting for."""

    target: str  # the trainer that lacks it: "nanoGPT" | "llm.c"
    key: str  # dotted best.yaml key, e.g. "runtime.compile"
    value: Any  # the winner's value
    instead: tuple[Any, ...]  # the values of `key` the target does run; () = no equivalent
    kind: GapKind  # what the target does instead
    numbers: dict[str, Any] = field(default_factory=dict)  # what its sentence names beyond these
    worth: Worth = Worth(kind="unread")  # what the sweep measured it to be worth (see `priced`)


class HandoffRefused(ValueError):
    """The export would train a different batch, precision or model: refused, naming the key."""

    def __init__(self, target: str, key: str, why: str, *, instead: str = "") -> None:
        self.target, self.key, self.why, self.instead = target, key, why, instead
        tail = f". {instead}" if instead else ""
        super().__init__(f"{target} export refused: {key} {why}{tail}")


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What best.yaml alone does not say outright: where the winner ran and in what precision."""

    device_type: str  # "cuda" | "cpu" (provenance.fingerprint.device, else runtime.device)
    dtype: str  # runtime.dtype resolved: fp32 | bf16 | fp16
    world: int  # processes per optimizer step (runtime.nproc)


def value(doc: Mapping[str, Any], key: str) -> Any:
    """best.yaml's value at a dotted key ("batch.micro_batch")."""
    node: Any = doc
    for part in key.split("."):
        node = node[part]
    return node


def facts_of(doc: Mapping[str, Any]) -> Facts:
    """The winner's device type, resolved precision and world size, from best.yaml."""
    runtime = doc["runtime"]
    measured = str(((doc.get("provenance") or {}).get("fingerprint") or {}).get("device") or "")
    asked = str(runtime.get("device", "auto"))
    device_type = "cuda" if (measured or asked).startswith("cuda") else "cpu"
    dtype = resolve_dtype_name(
        runtime.get("dtype", "auto"), device_type=device_type, bf16_supported=True
    )
    return Facts(device_type=device_type, dtype=dtype, world=int(runtime.get("nproc", 1)))


def check_tokens(doc: Mapping[str, Any], *, target: str, world: int) -> int:
    """tokens_per_step, once micro_batch x grad_accum x block_size x world gives it exactly."""
    b, block = doc["batch"], int(doc["model"]["block_size"])
    got = int(b["micro_batch"]) * int(b["grad_accum"]) * block * world
    if got != int(b["tokens_per_step"]):
        raise HandoffRefused(
            target,
            "batch.tokens_per_step",
            (
                f"{b['tokens_per_step']} is not micro_batch {b['micro_batch']} x grad_accum "
                f"{b['grad_accum']} x block_size {block} x world {world} = {got}: the file would "
                f"train a different batch"
            ),
        )
    return got


def overlay(doc: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """best.yaml with a trial's searched knobs in place; grad_accum follows a searched micro-batch
    so the tokens per step stay pinned (the space's split rule)."""
    out = copy.deepcopy(dict(doc))
    for key, v in params.items():
        section, _, name = key.partition(".")
        if isinstance(out.get(section), dict) and name and "." not in name:
            out[section][name] = v
    if "batch.micro_batch" in params and "batch.grad_accum" not in params:
        b, world = out["batch"], int(out["runtime"].get("nproc", 1))
        per_pass = int(b["micro_batch"]) * int(out["model"]["block_size"]) * world
        b["grad_accum"] = max(1, int(b["tokens_per_step"]) // per_pass)
    return out


def priced(
    gaps: Sequence[Gap],
    trials: Iterable[SearchRun] | None,
    *,
    winner: int | None,
    reachable: str = "",
) -> list[Gap]:
    """Each gap with its measured worth. `trials` None: the study was not read (`reachable` says
    why)."""
    if trials is None:
        return [replace(g, worth=Worth(kind="unread", reachable=reachable)) for g in gaps]
    trials = list(trials)
    best = next((t for t in trials if t.number == winner), None)
    if best is None:
        return [replace(g, worth=Worth(kind="winner_missing")) for g in gaps]
    return [replace(g, worth=_worth(g, best, trials)) for g in gaps]


def _worth(gap: Gap, winner: SearchRun, trials: list[SearchRun]) -> Worth:
    if gap.key not in winner.params:
        return Worth(kind="not_searched")
    others = {k: v for k, v in winner.params.items() if k != gap.key and not _neutral(k)}
    twins = [
        t
        for t in trials
        if t.number != winner.number
        and t.params.get(gap.key) in gap.instead
        and all(t.params.get(k) == v for k, v in others.items())
    ]
    if not twins:
        return Worth(kind="no_twin")
    twin = max(twins, key=lambda t: t.tokens_per_s)
    return Worth(kind="measured", twin=twin, winner_tokens_per_s=winner.tokens_per_s)


def best_expressible(
    doc: Mapping[str, Any],
    trials: Iterable[SearchRun] | None,
    check: Callable[[Mapping[str, Any]], object],
    *,
    reachable: str = "",
) -> str:
    """The fastest measured trial the target can express (its `check` raises HandoffRefused on
    the others), as one line; where the study was not read, that."""
    if trials is None:
        return f"best measured config it can express: unknown ({reachable or 'study not read'})"
    fits = []
    for t in trials:
        try:
            check(overlay(doc, t.params))
        except HandoffRefused:
            continue
        fits.append(t)
    if not fits:
        return "best measured config it can express: none (no trial of the study fits it)"
    t = max(fits, key=lambda t: t.tokens_per_s)
    knobs = ", ".join(f"{k}={value_text(v)}" for k, v in sorted(t.params.items()))
    return (
        f"best measured config it can express: trial {t.number}, {t.tokens_per_s:,.0f} tokens/s "
        f"({knobs or 'the study fixed every knob'})"
    )


def _neutral(key: str) -> bool:
    return key.startswith(SPEED_NEUTRAL_PREFIXES)


def value_text(v: Any) -> str:
    """A best.yaml value as the handoff lines write it: booleans as YAML writes them."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def measured_trials(trials: Iterable[Any]) -> list[SearchRun]:
    """The study's completed trials (Optuna FrozenTrials, read duck-typed) with their search run's
    tokens/s (the `metrics` user attribute the sweep records)."""
    out = []
    for t in trials:
        tps = ((getattr(t, "user_attrs", None) or {}).get("metrics") or {}).get("tokens_per_s")
        if getattr(getattr(t, "state", None), "name", "") == "COMPLETE" and tps:
            out.append(
                SearchRun(
                    number=t.number,
                    params=dict(t.params),
                    state="complete",
                    tokens_per_s=float(tps),
                )
            )
    return out
