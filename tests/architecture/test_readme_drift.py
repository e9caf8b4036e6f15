"""The pasted output of README.md and of the docs site (docs/**/*.md) still comes out of its
commands (issue 25: a README claim is a promise; issue 35: the docs make the same promises).

Every ```text block of README.md or a docs page that starts with a `$ ` command line is a command
whose output is pasted below it. Each one is registered here: run for real (the cheap ones as
written; the default sweep at a smaller budget, its output captured once for the module), or
skipped with the reason (a GPU the CI machine lacks). A block that is in neither list fails the
test, so a new paste gets a check. Lines are compared by shape: numbers, paths, times and knob
values are normalised, and a pasted line (pasted lines may be cut at 160 characters) must be the
start of some output line's shape. Lines that depend on the run's own trajectory (which trial
won, which were pruned) belong to a family (their first words); such a line is only required
where the run printed that family."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import pytest

from tests.sweep_helpers import REPO
from tests.sweep_helpers import unwrapped as unwrap_console

README = REPO / "README.md"
# every page the checks walk: the README, then the docs site's pages (docs/gpu/ raw files included)
DOCS: tuple[Path, ...] = (README, *sorted((REPO / "docs").rglob("*.md")))


@dataclass(frozen=True)
class Block:
    line: int  # the page's line of the `$ ` command
    command: str  # joined across `\` continuations
    output: list[str]
    page: str = "README.md"  # relative to the repository


def pasted_blocks(text: str, *, page: str = "README.md") -> list[Block]:
    """The ```text blocks that start with a `$ ` command, with the lines pasted after it."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```text" and i + 1 < len(lines) and lines[i + 1].startswith("$ "):
            start, j = i + 1, i + 1
            command = lines[j][2:]
            while command.endswith("\\"):
                j += 1
                command = command[:-1].rstrip() + " " + lines[j].strip()
            k = j + 1
            while k < len(lines) and lines[k].strip() != "```":
                k += 1
            output = lines[j + 1 : k]
            blocks.append(Block(line=start + 1, command=command, output=output, page=page))
            i = k
        i += 1
    return blocks


Optional: TypeAlias = "tuple[tuple[str, int, int], ...]"

# --- shapes ---------------------------------------------------------------------------------

# Hydra's job log ("[date][module][INFO] - ") and its sweep log ("[date][HYDRA] ")
_LOG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\](\[[^\]]*\]\[[A-Z]+\] - |\[HYDRA\] )")
_SUBS = [
    (re.compile(r"\b\d{4}-\d\d-\d\d(T[\d:+.]+)?\b"), "DATE"),
    (re.compile(r"\b\d\d-\d\d-\d\d\b"), "TIME"),
    (re.compile(r"(?<![\w.])(/|\.\.?/)[\w./@+-]*"), "PATH"),  # absolute and ./ paths
    (re.compile(r"(?<==)[^\s,;()]+"), "V"),  # key=value: the value (knobs, overrides)
    (re.compile(r"\b\d+m\d\ds\b|\b\d+h\d\dm\b"), "N"),  # 4m23s, 1h40m
    (re.compile(r"\d+(,\d{3})*(\.\d+)?(e[+-]?\d+)?"), "N"),
    (re.compile(r"\bN (ms|s|min|h)\b"), "N U"),  # 36.2 min, 1.8 h: one duration, any unit
    (re.compile(r"(N [a-z]+?)s\b"), r"\1"),  # a count's noun, singular or plural
    (re.compile(r"\[('[^']*'(, )?)+\]"), "[LIST]"),  # ['efficient', 'cudnn']
    (
        re.compile(
            r"\b(complete|pruned|failed|crash|oom|nan|timeout|duplicate|excluded|unrun|"
            r"interrupted|waiting|running)\b"
        ),
        "STATE",
    ),
    (re.compile(r"(trial N)(, trial N)+"), r"\1"),  # a round's list of contenders
    (re.compile(r"[━─═]+"), "━"),  # table rules of any width
    (re.compile(r"\s+"), " "),
]


def shape(line: str) -> str:
    line = _LOG_PREFIX.sub("", line)
    line = line.removeprefix("[...] ")
    for pattern, repl in _SUBS:
        line = pattern.sub(repl, line)
    return line.strip()


def elided(line: str) -> bool:
    """README lines that stand for cut output: '...', '   ...', '  ... (fp32 and tf32 rows)'."""
    return line.strip() == "" or line.strip().startswith("...")


def unwrapped(lines: list[str]) -> list[str]:
    """Lines with the console's wrapping undone (tests/sweep_helpers.py), a paste's `...` lines
    kept apart, so a paste is compared the same at any console width."""
    return unwrap_console(lines, keep=elided)


def missing_shapes(pasted: list[str], output: str, *, optional: Optional = ()) -> list[str]:
    """The pasted lines whose shape starts no output line's shape, both unwrapped. A line whose
    shape starts with the prefix of an `optional` entry (prefix, family words, head words) names
    this run's own trajectory: it is required only where the output has a line of its family (the
    prefix, or the line's first `family words` words), and then only by its head (its first
    `head words`)."""
    got = [shape(ln) for ln in unwrapped(output.splitlines())]
    missing = []
    for line in unwrapped(pasted):
        if elided(line):
            continue
        want = shape(line)
        if any(g.startswith(want) for g in got):
            continue
        entry = next((o for o in optional if want.startswith(o[0])), None)
        if entry is not None:
            prefix, family_words, head_words = entry
            fam = head(want, family_words) if family_words else prefix
            kin = [g for g in got if g.startswith(fam)]
            if not kin or any(g.startswith(head(want, head_words)) for g in kin):
                continue
        missing.append(line)
    return missing


def head(line_shape: str, words: int) -> str:
    return " ".join(line_shape.split(" ")[:words])


def run_command(command: str, *, cwd: Path, extra: list[str] = (), timeout: float = 300) -> str:
    argv = shlex.split(command)
    assert argv[0] == "python", command
    if argv[1].endswith(".py"):  # sweep.py: the repository's, run from a fresh folder
        argv[1] = str(REPO / argv[1])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "250"}
    proc = subprocess.run(
        [sys.executable, *argv[1:], *extra],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out


# --- the registry -----------------------------------------------------------------------------

# commands pasted with GPU output: this machine and CI have no GPU
NOT_RUN_HERE = {
    "python sweep.py -m search=gpu-quick": "the pasted run is an H100's (no GPU here)",
    "python3 sweep.py -m search=gpu-quick": "the pasted run is an H200's (no GPU here)",
}
EXPLAIN = "python -m train.explain --model gpt2-xl"
PLAN = "python sweep.py -m search=throughput model=gpt2-xl"
DEFAULT_SWEEP = "python sweep.py -m search=throughput"
LEASE_PLAN = "python scripts/gpu_acceptance.py --lease --plan"

# the default sweep, smaller: the same command and space, fewer and shorter trials, a short race
# (a wall cap of 150 s, the verification included, instead of the CPU's 390 s)
SMALL_SWEEP = [
    "hydra.sweeper.n_trials=8",
    "hydra.sweeper.budget.cpu_max_wall_s=150",
    "hydra.sweeper.verify.max_rounds=3",
    "trial.max_steps=6",
    "trial.max_seconds=4",
]
# report lines that name this run's own trajectory: required where the run printed the family
# (the line's shape prefix, family words (0: the prefix is the family), head words)
SWEEP_OPTIONAL: Optional = (
    ("trial N", 0, 4),
    ("polish (N", 0, 4),
    ("race round N", 0, 4),
    ("verifying N", 0, 4),
    ("race: trial N", 0, 4),
    ("│", 0, 1),
    ("starting config (", 0, 4),
    ("winner (trial N", 0, 2),
    ("next: ", 2, 2),
    ("- ", 2, 4),
    ("the trial budget", 0, 4),
    ("the wall budget", 0, 4),
    ("best.yaml pins", 0, 4),
    ("best.yaml saves", 0, 4),
    ("only trial", 0, 4),
    ("trials: ", 0, 4),
    # the guard runs only where a contender changes the math (else it says "no contender changes
    # the math" and prints no tolerance or verdict: each of those is its own family, by its first 3
    # words); float8's reason names what this install lacks (torchao, or a GPU); an export
    # refuses or lists gaps by the winner
    ("numerics guard", 3, 2),
    ("loss by step", 0, 3),
    ("runtime.float8: dropped", 0, 2),
    ("best_nanogpt.py: ", 0, 1),
    ("best_llmc.sh: ", 0, 1),
)


def _kind(block: Block) -> str:
    for prefix in NOT_RUN_HERE:
        if block.command.startswith(prefix):
            return "not run here"
    if block.command.startswith(EXPLAIN):
        return "explain"
    if block.command.startswith(PLAN) and "hydra.sweeper.plan.enabled=true" in block.command:
        return "plan"
    if block.command.startswith(LEASE_PLAN):
        return "plan"  # pure arithmetic on any machine: run as written, compared by shape
    if block.command == DEFAULT_SWEEP:
        return "default sweep"
    return "unregistered"


BLOCKS = [
    b for page in DOCS for b in pasted_blocks(page.read_text(), page=str(page.relative_to(REPO)))
]


def block_id(block: Block) -> str:
    return f"{block.page}:{block.line}"


def test_every_pasted_command_is_registered():
    pages = {b.page for b in BLOCKS}
    assert "README.md" in pages, "README.md has no pasted command output: the parser or it changed"
    assert pages - {"README.md"}, "no docs page has pasted command output: the parser changed"
    unregistered = [f"{block_id(b)}: $ {b.command}" for b in BLOCKS if _kind(b) == "unregistered"]
    assert not unregistered, (
        f"register these in tests/architecture/test_readme_drift.py: {unregistered}"
    )


def _ids(kind: str) -> list[Block]:
    return [b for b in BLOCKS if _kind(b) == kind]


@pytest.mark.parametrize("block", _ids("explain"), ids=block_id)
def test_explain_output_is_as_pasted(block: Block, tmp_path: Path):
    """The arithmetic is deterministic: every pasted line comes out exactly."""
    out = run_command(block.command, cwd=tmp_path).splitlines()
    assert [ln for ln in block.output if ln not in out] == [], "\n".join(out)


@pytest.mark.parametrize("block", _ids("plan"), ids=block_id)
def test_plan_output_keeps_its_shape(block: Block, tmp_path: Path):
    extra = [] if block.command.startswith(LEASE_PLAN) else [f"hydra.sweep.dir={tmp_path / 's'}"]
    out = run_command(block.command, cwd=tmp_path, extra=extra)
    missing = missing_shapes(block.output, out)
    assert not missing, f"pasted lines whose shape no longer comes out: {missing}\n--- got:\n{out}"


@pytest.fixture(scope="module")
def default_sweep_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`python sweep.py -m search=throughput` once, at a smaller budget, in a fresh folder."""
    cwd = tmp_path_factory.mktemp("readme-sweep")
    return run_command(DEFAULT_SWEEP, cwd=cwd, extra=SMALL_SWEEP, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("block", _ids("default sweep"), ids=block_id)
def test_default_sweep_output_keeps_its_shape(block: Block, default_sweep_output: str):
    missing = missing_shapes(block.output, default_sweep_output, optional=SWEEP_OPTIONAL)
    assert not missing, (
        f"{block_id(block)}: pasted lines whose shape no longer comes out: {missing}\n"
        f"--- got:\n{default_sweep_output}"
    )


# --- the checker itself -----------------------------------------------------------------------


def test_shapes_ignore_numbers_paths_and_knob_values():
    a = "[...] wrote /tmp/fc3/multirun/2026-11-25/17-28-34/best.yaml"
    b = "[2026-11-25 19:01:02,123][sweeper.report.best_yaml][INFO] - wrote /x/y/best.yaml"
    assert shape(a) == shape(b)
    t1 = "trial   0 complete           30,893 tok/s  mfu spec - ceiling 35.2%  micro_batch=8 dir=ch"
    t2 = "trial  12 pruned 1,619 tok/s mfu spec - ceiling 5.0% micro_batch=16 dir=/dev/shm/x mode=s"
    assert shape(t2).startswith(shape(t1))
    assert shape("race round 2: trial 3, trial 0") == shape("race round 5: trial 1")
    assert shape("every 9,749 steps (36.2 min)") == shape("every 1 step (1.8 h)")
    assert shape("dropped ['efficient', 'cudnn'] (x)") == shape("dropped ['fa3'] (x)")


def test_a_line_that_no_longer_comes_out_fails():
    pasted = ["trials: complete 4, pruned 10", "best config: /tmp/x/best.yaml"]
    assert missing_shapes(pasted, "trials: complete 2, pruned 1\nbest config: /a/best.yaml") == []
    renamed = "trials: done 2, stopped 1\nbest config: /a/best.yaml"
    assert missing_shapes(pasted, renamed) == ["trials: complete 4, pruned 10"]
    # an optional family is excused where the run printed none of it, else checked by its head
    said, rounds = "race round 1: trial 0", (("race round", 0, 4),)
    assert missing_shapes([said], "", optional=rounds) == []
    assert missing_shapes([said], "race round 1 of 3: trial 0", optional=rounds) == [said]
    nxt, per_knob = "  next: runtime.dtype=bf16: gain unknown (not measured)", (("next: ", 2, 4),)
    other_tail = "  next: runtime.dtype=bf16: gain unknown (measured at other settings only)"
    assert missing_shapes([nxt], other_tail, optional=per_knob) == []
    assert missing_shapes([nxt], "  next: batch.micro_batch=16: up to 2x", optional=per_knob) == []
    assert missing_shapes([nxt], "  next: runtime.dtype=bf16 is", optional=per_knob) == [nxt]


def test_a_wrapped_line_is_compared_unwrapped():
    """The console wraps at its width (at most 160): a paste wrapped at one width holds against
    output wrapped at another, and a changed continuation still fails."""
    from sweeper.launch.log_routing import wrap_lines

    line = (
        "[...] prior: 1 point(s) on this CPU: the FLOP arithmetic does not hold on a CPU (no "
        "datasheet peak, bf16 slower than fp32 without AMX, compile costing more than a short "
        "trial gains), so it sets only threads and workers"
    )
    pasted, output = wrap_lines(line, 100), "\n".join(wrap_lines(line, 160))
    assert len(pasted) == 3 and len(output.splitlines()) == 2
    assert missing_shapes(pasted, output) == []
    changed = output.replace("threads and workers", "threads")
    assert missing_shapes(pasted, changed) == [" ".join(ln.strip() for ln in pasted)]


def test_the_install_note_says_where_a_cpu_torch_comes_from():
    """On a stock Linux machine PyPI's torch is the CUDA build: a page that explains the pinned
    `pip install torch==2.13.0` says so and gives a CPU-only machine the CPU index (issue 35)."""
    explaining = [p for p in DOCS if "`pip install torch==2.13.0` first" in p.read_text()]
    assert explaining, "no page explains the pinned torch install"
    for page in explaining:
        text = " ".join(page.read_text().split())
        assert "keeps pip from pulling" not in text, page
        assert "PyPI's `torch` is the CUDA build" in text, page
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text, page
