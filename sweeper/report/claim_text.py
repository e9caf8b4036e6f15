"""A shared study's export in words: which worker exports its best, and where.

sweeper/study/export_claim.py decides who exports (a claim, or a deferral to the workers still
running trials) and returns it as data; the sweep's closing report (sweeper/engine.py) says it
through these functions.
"""

from __future__ import annotations

from sweeper.study.export_claim import Claim, Deferral


def claim_line(claim: Claim) -> str:
    """Why this worker does not export: who does, or did, and the file that holds the best."""
    if claim.kind == "held":
        # a worker that never named itself: no name to give, no folder
        who = f"worker {claim.holder}" if claim.holder else "another worker"
        where = (
            _where(claim.best_yaml, claim.holder)
            if claim.holder
            else claim.best_yaml or "its own sweep dir"
        )
        return (
            f"{who} is verifying study {claim.study!r}'s completed trials; it writes the "
            f"study's best to {where}"
        )
    if claim.kind == "raced":
        return "another worker took over the export claim at the same moment"
    if claim.kind == "exported":
        return (
            f"the best of study {claim.study!r} ({claim.compared} completed trials) is exported "
            f"already: {claim.best_yaml}"
        )
    raise ValueError(f"claim kind {claim.kind!r} (ours={claim.ours}) has no words: it exports")


def deferral_line(deferral: Deferral) -> str:
    """This worker's search ended while others still run trials: who exports, and where."""
    pairs = zip(deferral.owners, deferral.best_yamls, strict=True)
    where = " or ".join(_where(path, owner) for owner, path in pairs)
    numbers = ", ".join(str(n) for n in deferral.trials)
    return (
        f"study {deferral.study!r} is shared: trial(s) {numbers} still run in worker(s) "
        f"{', '.join(deferral.owners)}; the last worker to finish verifies the study's completed "
        f"trials and writes the study's best to {where}"
    )


def _where(best_yaml: str | None, owner: str) -> str:
    """A worker's best.yaml, or its sweep dir by name where it never recorded one."""
    return best_yaml or f"the sweep dir of worker {owner}"
