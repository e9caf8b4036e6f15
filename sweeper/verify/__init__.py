"""Verification as a race: the search's contenders and the starting config re-measured in fresh
processes, in paired and shuffled rounds, until a paired test decides.

Pure (decide from numbers):
- `race_stats`: the paired test of two configs raced in the same rounds.
- `race_rules`: the judge after each round: who is dropped, who leads, whether it is over.
- `winner`: the verdict: the winner, how it was chosen and its numbers (`Verdict`, `race_verdict`).
Runs trials:
- `race_rounds`: the rounds launched for real and stored in the study as they finish.
- `stage`: the stage the engine calls (`verify`): contenders in, a typed `Winner` out.
"""

__all__ = ["race_rounds", "race_rules", "race_stats", "stage", "winner"]
