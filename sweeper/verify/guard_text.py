"""The numerics guard's sentences: the tolerance's derivation, whether the reference trained, and
a candidate's verdict. The guard's arithmetic (sweeper/verify/guard_rules.py) returns numbers;
this module is the one place they become words, for the report, the log, the study's record and
the MLflow tags alike. Pure."""

from __future__ import annotations

import math

from sweeper.plan.guard_price import GuardMode
from sweeper.verify.guard_rules import Descent, Divergence, GuardCheck, Tolerance


def mode_text(m: GuardMode) -> str:
    """Whether the guard runs and what decided it, in a few words."""
    if m.setting != "auto":
        return f"{m.setting} (hydra.sweeper.guard.mode={m.setting})"
    if m.keys:
        return f"on (auto: the space searches {', '.join(m.keys)})"
    return "off (auto: the space searches no math-changing key)"


def steps_text(d: Divergence) -> str:
    """Where a divergence is: "step 4" or "steps 4-7"."""
    last = d.step + d.window - 1
    return f"step {d.step}" if last == d.step else f"steps {d.step}-{last}"


def tolerance_text(tol: Tolerance) -> str:
    """One line that says where the tolerance comes from."""
    worst = max(tol.pairs, key=lambda p: p[2].value)
    rule = (
        f"{tol.k:g} x seed spread {tol.spread:.4f}"
        if tol.k * tol.spread >= tol.floor
        else f"the floor {tol.floor:g} (k {tol.k:g} x seed spread {tol.spread:.4f} = "
        f"{tol.k * tol.spread:.4f} is below it)"
    )
    pairs = "; ".join(
        f"seeds {a} vs {b}: {d.value:.4f} at {steps_text(d)}" for a, b, d in tol.pairs
    )
    seeds = len({s for p in tol.pairs for s in p[:2]})
    return (
        f"tolerance {tol.value:.4f} nats = {rule}; the seed spread is the largest gap "
        f"between the reference's {tol.window}-step mean losses over its "
        f"{seeds} seeds ({pairs}; largest: seeds {worst[0]} vs {worst[1]})"
    )


def descent_text(d: Descent) -> str:
    """How the reference's least-falling seed moved, against the seed spread."""
    if not math.isfinite(d.drop):
        fell = "is not finite"
    else:
        fell = f"{'falls' if d.drop >= 0 else 'rises'} {abs(d.drop):.4f} nats"
    return (
        f"seed {d.seed}'s loss {fell} from its first {d.window}-step mean to its "
        f"last, against a seed spread of {d.spread:.4f}"
    )


def check_text(c: GuardCheck) -> str:
    """A candidate's verdict in one sentence: its drift against the tolerance, its mean loss."""
    d = c.divergence
    ratio = "inf" if not math.isfinite(d.value) else f"{d.value / c.tolerance:.2g}x"
    where = "within" if c.passed else "OUTSIDE"
    average = (
        f"its loss is {'higher' if c.mean_gap > 0 else 'lower'} by {abs(c.mean_gap):.4f} on average"
        if abs(c.mean_gap) >= 5e-5
        else "its mean loss is the reference's to 4 decimals"
    )
    return (
        f"its loss curve drifts {d.value:.4f} nats from the reference's at {steps_text(d)} "
        f"({c.window}-step means; {ratio} the tolerance {c.tolerance:.4f}: {where} it); over "
        f"{c.steps} steps {average}, last step {c.last[0]:.4f} vs {c.last[1]:.4f}"
    )
