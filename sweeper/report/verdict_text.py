"""The race's verdict in words: one or two sentences with the numbers that decided it.

sweeper/verify/winner.py decides and returns a typed `Verdict` (its kind and numbers); every place
that shows it (the console's story, sweep.log, the study's "verdict" record, MLflow's tags,
best.yaml's provenance) writes it through `verdict_text`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from sweeper.numbers import fmt_pct
from sweeper.verify.race_rules import interval_text
from sweeper.verify.race_stats import Comparison
from sweeper.verify.winner import Medians, RaceEnd, Summary, Verdict

if TYPE_CHECKING:
    import optuna

    from sweeper.verify.stage import Winner

log = logging.getLogger(__name__)


def verdict_text(verdict: Verdict, *, lead: Comparison | None = None) -> str:
    """The verdict for the user; `lead` is the winner's paired lead over the starting config,
    where the race measured one."""
    if verdict.race is not None:
        said = f"; lead over the starting config {interval_text(lead)}" if lead else ""
        return f"{_race_text(verdict.kind, verdict.race)}{said}."
    if verdict.medians is None:
        raise ValueError(f"verdict of kind {verdict.kind!r} carries neither medians nor a race")
    return _medians_text(verdict.kind, verdict.medians)


def winner_text(winner: Winner) -> str:
    """The verified winner's verdict, with its lead over the starting config."""
    return verdict_text(winner.verdict, lead=winner.lead_over_start)


def record_verdict(study: optuna.Study, winner: Winner) -> None:
    """The verdict recorded on the study (its user attr "verdict": the winning trial, the reason,
    how the race ended and the lead over the start) and in sweep.log."""
    reason = winner_text(winner)
    log.debug("verdict: %s", reason)  # printed with the report (sweeper/report/story.py)
    record: dict[str, Any] = {
        "winner_trial": winner.number,
        "reason": reason,
        "decisive": winner.verdict.decisive,
        "outcome": winner.outcome,
        "rounds": winner.rounds,
        "lead_over_start": (
            None if winner.lead_over_start is None else dataclasses.asdict(winner.lead_over_start)
        ),
    }
    study.set_user_attr("verdict", record)


def _race_text(kind: str, race: RaceEnd) -> str:
    """How the race ended, without the closing period."""
    rounds = f"{race.rounds} round{'s' if race.rounds != 1 else ''}"
    dropped = ", ".join(f"trial {n} after round {r}" for n, r in race.dropped)
    failed = ", ".join(f"trial {n}" for n in race.failed)
    chosen = f"trial {race.chosen}"
    if kind == "race_alone":
        others = f" ({failed} failed every run)" if failed else ""
        return f"only {chosen} was measured, in {rounds}{others}: nothing to race"
    if kind == "race_won":
        why = (
            f"{chosen} wins the race after {rounds}: every other contender was proved slower "
            f"({dropped})"
        )
        return why + (f" or failed every run ({failed})" if failed else "")
    if kind == "race_equivalent":
        why = (
            f"after {rounds} the {race.survivors} survivors are equivalent (each within the "
            f"margin of the leader); exporting the simplest, {chosen}"
        )
    else:
        open_pairs = "; ".join(
            f"{chosen} over trial {n} {interval_text(c)}" for n, c in race.open_pairs
        )
        why = (
            f"not significant after {rounds}: {open_pairs or 'one run each'}; exporting the "
            f"leader, {chosen}, the best estimate but not a proven win. More rounds "
            f"(hydra.sweeper.verify.max_rounds), a quieter machine or a larger model (longer "
            f"steps, less relative noise) would separate them"
        )
    return why + (f" (dropped as slower: {dropped})" if dropped else "")


def _medians_text(kind: str, m: Medians) -> str:
    """A ranking by median: who won and by how much, or who was chosen among the tied."""
    best, chosen = m.best, m.chosen
    cv_note = (
        f" Only one measurement per candidate, so the CV is unknown; the noise is the "
        f"{fmt_pct(m.floor_only)} floor alone."
        if m.floor_only is not None
        else ""
    )
    if kind == "only_one":
        return (
            f"Only one candidate was measured ('{best.candidate.key}', median {best.median:.4g}, "
            f"n={best.n}); exporting it without a comparison.{cv_note}"
        )
    if kind == "decisive" and m.runner_up is not None:
        runner = m.runner_up
        overlap = "overlap" if m.overlap else "do not overlap"
        better = "higher" if m.maximize else "lower"
        return (
            f"'{best.candidate.key}' wins decisively: median {best.median:.4g} vs "
            f"{runner.median:.4g} for the runner-up '{runner.candidate.key}' "
            f"({fmt_pct(m.apart)} {better}, beyond the noise of {fmt_pct(m.noise)}; "
            f"CV {_cvs(best, runner)}); their ranges {_range(best)} and "
            f"{_range(runner)} {overlap}.{cv_note}"
        )
    head = (
        f"The top {len(m.tied)} are within noise ({fmt_pct(m.apart)} apart, CV {_cvs(*m.tied)}; "
        f"medians {', '.join(f'{s.median:.4g}' for s in m.tied)})"
    )
    if kind == "tied_best":
        tail = (
            f"; '{best.candidate.key}' has the best median and is also the simplest, exporting it."
        )
    elif kind == "tied_simpler":
        tail = (
            f"; exporting the simpler config '{chosen.candidate.key}' (simplicity "
            f"{chosen.candidate.simplicity} vs {best.candidate.simplicity} for the best median "
            f"'{best.candidate.key}', lower = fewer changes)."
        )
    else:
        tail = (
            f"; equally simple, so exporting '{chosen.candidate.key}', which uses a lighter "
            f"compile mode or fewer data workers than the best median '{best.candidate.key}'."
        )
    return head + tail + cv_note


def _range(s: Summary) -> str:
    return f"[{s.lo:.4g}, {s.hi:.4g}]"


def _cvs(*stats: Summary) -> str:
    """Like 1.8%/2.4%; n/a for a single value; unknown when no candidate has two values."""
    if all(s.n < 2 for s in stats):
        return "unknown"
    return "/".join(fmt_pct(s.cv) if s.n >= 2 else "n/a" for s in stats)
