"""The GPU acceptance run (scripts/gpu_acceptance.py): gpt2-xl planned, swept to a verified
best.yaml and trained from it on one GPU (and, on a host with several, one data-parallel trial on
two), in stages of under ten minutes that hand a small packed state from one to the next; the
same stages run the tiny model on a CPU as a dry run.

    profiles       what a run measures and each stage's time budget (pure)
    plan           the starting config and the memory points, from the memory model (pure)
    commands       the sweep, plan and production command lines (pure)
    deadline       a child command against a stage's deadline
    stages         the plan, sweep, production and ddp stages' bodies
    run            one stage start to end: state in, body, evidence, state out
    state          the packed state
    evidence       the evidence file
    readme_table   the README's GPU section from the evidence (pure)
    kit            the size of what travels to a GPU host

Imported as `acceptance` with scripts/ on sys.path, as the other scripts import their siblings.
"""

from acceptance.kit import kit_size
from acceptance.profiles import NUMBERED, PROFILES, STAGE_ORDER, profile_named, stage_named
from acceptance.readme_table import readme_section
from acceptance.run import run_stage

__all__ = [
    "NUMBERED",
    "PROFILES",
    "STAGE_ORDER",
    "kit_size",
    "profile_named",
    "readme_section",
    "run_stage",
    "stage_named",
]
