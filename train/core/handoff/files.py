"""One target's handoff file for a best.yaml: the text, its cannot-express lines, or the refusal.

`handoff(doc, "nanogpt" | "llmc", trials=...)` checks the winner against the target, prices each
gap with the study's trials (train/core/handoff/gaps.py) and renders the file; where the target
cannot train the winner at all it renders a file that refuses to run, naming the key and the best
measured config the target can express. Pure: the caller reads the study and writes the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from train.core.evidence import SearchRun
from train.core.handoff import llmc, nanogpt
from train.core.handoff.gaps import Gap, HandoffRefused, best_expressible, priced
from train.core.handoff.gaps_text import gap_line

TARGETS = {"nanogpt": nanogpt, "llmc": llmc}
RENDER = {"nanogpt": nanogpt.nanogpt_file, "llmc": llmc.llmc_script}
REFUSE = {"nanogpt": nanogpt.refusal_file, "llmc": llmc.refusal_script}


@dataclass(frozen=True, kw_only=True)
class Handoff:
    target: str  # "nanogpt" | "llmc"
    file_name: str  # best_nanogpt.py | best_llmc.sh
    text: str
    lines: list[str]  # what the target cannot express (priced), or the refusal and the fallback
    refused: HandoffRefused | None = None
    gaps: tuple[Gap, ...] = ()  # the priced gaps behind `lines` (nanoGPT's vocabulary lines aside)


def handoff(
    doc: Mapping[str, Any],
    target: str,
    *,
    trials: Iterable[SearchRun] | None = None,
    reachable: str = "",
    folder: nanogpt.DataFolder | None = None,
) -> Handoff:
    """The target's file for `doc` (best.yaml as a dict). `trials` None: the study was not read
    (`reachable` says why, and every price reads "not measured"). `folder`: best.yaml's data
    folder as nanoGPT will find it (`nanogpt.read_data_folder`), None where it was not looked at."""
    if target not in TARGETS:
        raise ValueError(f"--to must be one of {sorted(TARGETS)}, got {target!r}")
    module = TARGETS[target]
    trials = None if trials is None else list(trials)
    notes = source_notes(doc, module.TARGET)
    try:
        facts = module.check(doc)
    except HandoffRefused as refused:
        lines = [str(refused), best_expressible(doc, trials, module.check, reachable=reachable)]
        text = REFUSE[target](refused, notes=notes, lines=lines[1:])
        return Handoff(
            target=target, file_name=module.FILE_NAME, text=text, lines=lines, refused=refused
        )
    winner = ((doc.get("provenance") or {}).get("sweep") or {}).get("trial")
    found = priced(module.gaps(doc, facts), trials, winner=winner, reachable=reachable)
    lines = [gap_line(g) for g in found]
    if target == "nanogpt":  # the data folder decides nanoGPT's vocabulary, not its config file
        vocab_notes, vocab_gaps = nanogpt.vocab_lines(doc, folder)
        lines += vocab_gaps
        text = nanogpt.nanogpt_file(doc, notes=notes, lines=lines, data=vocab_notes)
    else:
        text = RENDER[target](doc, notes=notes, lines=lines)
    return Handoff(
        target=target, file_name=module.FILE_NAME, text=text, lines=lines, gaps=tuple(found)
    )


def source_notes(doc: Mapping[str, Any], target: str) -> list[str]:
    """Where the winner came from and what it measured."""
    prov = doc.get("provenance") or {}
    sweep, metrics = prov.get("sweep") or {}, prov.get("metrics") or {}
    device = (prov.get("fingerprint") or {}).get("device_name") or "this machine"
    tps = metrics.get("tokens_per_s")
    measured = f"{tps:,.0f} tokens/s on {device}" if tps else "no measurement recorded"
    return [
        f"{target} handoff of best.yaml (study {sweep.get('study', '?')}, trial "
        f"{sweep.get('trial', '?')}): {measured}",
    ]
