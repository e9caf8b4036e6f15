"""The rooms of sweeper/ and train/ and the order they sit in: a module may import its own room and
the rooms declared below it, never one above it or beside it on the same level.

A room is a subpackage (sweeper/verify/, train/measure/) or a top-level module (sweeper/engine.py,
train/core/config.py). Imports are read with `ast`, function-level and TYPE_CHECKING ones included:
a lazy import is still an arrow a reader has to follow. A room missing from the tables fails the
test, so a new one is placed on purpose. train/ never imports the sweeper.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Bottom first. Rooms on one level are independent: neither imports the other.
SWEEPER_LAYERS: tuple[tuple[str, ...], ...] = (
    ("masking", "metrics", "numbers", "preset_file"),  # leaves (and a search preset's keys)
    ("forecast",),  # one trial's wall, phase by phase: set-up, compile per graph, steps
    ("space",),  # the rule book for one point; imports the forecast only
    ("settings",),  # hydra.sweeper.* typed and checked once (the race's rules too)
    ("study",),  # the Optuna state, its budget and objective
    ("launch",),  # one trial as a Hydra job in a child process
    ("tracking",),  # MLflow, and the Tracker protocol the context names
    ("context",),  # what the search and the race share
    ("plan",),  # everything before the first trial
    ("verify",),  # the race
    ("report",),  # what the user reads; any stage above may print through it
    ("search",),  # the loop prints a progress line per trial (report.console)
    ("start",),  # the study opened, its first points queued, the MLflow parent run
    ("engine",),  # the whole sweep as a story
)

TRAIN_LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),  # torch-free: schema, rules, FLOPs, memory, results (all the sweeper may import)
    ("device", "proc"),  # what a device offers and does; process plumbing (probe, zygote)
    ("model",),
    ("data",),
    ("measure",),  # clocks, peaks measured, memory measured, compile counters
    ("run",),  # the step loop, checkpoints, DDP
    ("trial",),  # one bounded run -> result JSON
    ("explain",),  # reads results: the floor and the verdict's text
    ("__main__", "export"),  # the production run; python -m train.export
)

# train/core/'s own modules, bottom first: the core is small, but its arrows still point one way.
CORE_LAYERS: tuple[tuple[str, ...], ...] = (
    ("units", "first_record"),  # GiB, defined once; the sweep's record of things measured once
    ("chips",),  # the chip table: peaks, compute capability, memory by device name
    # leaves: rules on plain values, FLOPs and MFU, statistics, what a trial reports, plumbing
    (
        "rules",
        "paths",
        "flops",
        "meters",
        "window_ci",
        "cost",
        "curve",
        "progress",
        "pruning",
        "disk_full",
        "deathsig",
        "compile_graphs",
        "save_record",
        "evidence",
        "hooks",
    ),
    ("config", "compile_cache", "compute_levers"),  # the schema; what reads the rules
    ("bottleneck_fixes",),  # what to do about each verdict: fixes and their gains
    (
        "keys",
        "memory_model",
        "diagnosis",
        "handoff",
        "config_checks",
        "schedule",
    ),  # read the schema
    # best.yaml against the schema; the result schema; the diagnosis's sentences
    ("config_file", "result", "diagnosis_text"),
    ("result_build",),  # a trial's raw measurements -> its result
)

# Back arrows known and owned by an open issue; each names its importing file and imported room.
KNOWN: set[tuple[str, str]] = set()


def _level(layers: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    return {room: i for i, level in enumerate(layers) for room in level}


def _imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in the tree, relative ones resolved; `from pkg import
    room` names pkg.room, since only the name says which room it is."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if "." in target:
                found.append((node.lineno, target))
            else:
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
    return found


def back_arrows(
    source: str,
    *,
    filename: str,
    package: str,
    layers: tuple[tuple[str, ...], ...],
    known: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
) -> list[str]:
    """The imports in `source` (the file `filename` under `package`/) that point at a room above
    its own or beside it, or at an undeclared room; one line each: file:line, module, why."""
    parts = Path(filename).with_suffix("").parts
    top = package.split(".")
    assert list(parts[: len(top)]) == top, filename
    is_package = parts[-1] == "__init__"
    module = ".".join(parts[:-1] if is_package else parts)
    inner = module.split(".")[len(top) :]
    if not inner:  # the package's own __init__: its face, not a room
        return []
    level = _level(layers)
    room = inner[0]
    if room not in level:
        where = "tests/architecture/test_layers.py"
        return [f"{filename}: room {room!r} is in no layer of {where}; declare it"]
    problems = []
    for line, target in _imported_modules(ast.parse(source), module, is_package):
        names = target.split(".")
        if top[0] == "train" and names[0] in ("sweeper", "hydra_plugins"):
            problems.append(f"{filename}:{line} imports {target}: train/ never imports the sweeper")
        if top == ["train", "core"] and names[0] == "train" and names[:2] != top:
            problems.append(f"{filename}:{line} imports {target}: the core imports only the core")
        if names[: len(top)] != top or len(names) <= len(top) or names[len(top)] == room:
            continue
        other = names[len(top)]
        if other not in level:
            problems.append(f"{filename}:{line} imports {target}: {other!r} is in no layer")
            continue
        if (filename, other) in known:
            continue
        if level[other] > level[room]:
            problems.append(
                f"{filename}:{line} imports {target}: {other} sits above {room} (a back arrow)"
            )
        elif level[other] == level[room]:
            problems.append(
                f"{filename}:{line} imports {target}: {other} and {room} share a level "
                "(declared independent)"
            )
    return problems


def _check(package: str, layers: tuple[tuple[str, ...], ...]) -> list[str]:
    problems = []
    for path in sorted((REPO / package.replace(".", "/")).rglob("*.py")):
        filename = str(path.relative_to(REPO))
        problems += back_arrows(
            path.read_text(encoding="utf-8"),
            filename=filename,
            package=package,
            layers=layers,
            known=KNOWN,
        )
    return problems


@pytest.mark.parametrize(
    ("package", "layers"),
    [("sweeper", SWEEPER_LAYERS), ("train", TRAIN_LAYERS), ("train.core", CORE_LAYERS)],
)
def test_no_back_arrows(package: str, layers: tuple[tuple[str, ...], ...]) -> None:
    problems = _check(package, layers)
    assert not problems, "\n".join(problems)


def test_every_sweeper_room_is_declared() -> None:
    rooms = {p.stem for p in (REPO / "sweeper").glob("*.py") if p.stem != "__init__"}
    rooms |= {p.parent.name for p in (REPO / "sweeper").glob("*/__init__.py")}
    assert rooms == set(_level(SWEEPER_LAYERS))


def test_the_top_of_the_sweeper_stays_short() -> None:
    """At most 10 modules beside the rooms, so a newcomer sees the rooms first."""
    top = [p for p in (REPO / "sweeper").glob("*.py") if p.stem != "__init__"]
    assert len(top) <= 10, sorted(p.name for p in top)


# ---- the checker itself, on planted sources --------------------------------------------------

LAYERS = (("low",), ("mid", "side"), ("high",))


@pytest.mark.parametrize(
    ("filename", "source", "expected"),
    [
        ("pkg/mid/a.py", "from pkg.low.x import f\n", []),
        ("pkg/mid/a.py", "from pkg.mid import b\nfrom . import c\n", []),
        ("pkg/mid/a.py", "import os\nfrom other.high import f\n", []),
        (
            "pkg/mid/a.py",
            "def f():\n    from pkg.high.y import g\n",
            ["pkg/mid/a.py:2 imports pkg.high.y: high sits above mid (a back arrow)"],
        ),
        (
            "pkg/low.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.mid.z\n",
            ["pkg/low.py:3 imports pkg.mid.z: mid sits above low (a back arrow)"],
        ),
        (
            "pkg/mid/a.py",
            "from ..side import s\n",
            ["pkg/mid/a.py:1 imports pkg.side: side and mid share a level (declared independent)"],
        ),
        (
            "pkg/attic/a.py",
            "",
            [
                "pkg/attic/a.py: room 'attic' is in no layer of "
                "tests/architecture/test_layers.py; declare it"
            ],
        ),
        ("pkg/__init__.py", "from pkg.high import x\n", []),
    ],
)
def test_the_checker_names_file_line_and_module(
    filename: str, source: str, expected: list[str]
) -> None:
    assert back_arrows(source, filename=filename, package="pkg", layers=LAYERS) == expected


@pytest.mark.parametrize(
    ("module", "plant", "package", "layers", "problem"),
    [
        # the space may not import the engine
        (
            "sweeper/space/limits.py",
            "from sweeper.engine import SweepEngine",
            "sweeper",
            SWEEPER_LAYERS,
            "imports sweeper.engine: engine sits above space (a back arrow)",
        ),
        # the core may not lean on train/'s torch side, even lazily: the compile counters' reader
        (
            "train/core/result.py",
            "import train.measure.compile_stats",
            "train.core",
            CORE_LAYERS,
            "imports train.measure.compile_stats: the core imports only the core",
        ),
    ],
)
def test_a_planted_back_arrow_in_a_real_module_fails(
    module: str, plant: str, package: str, layers: tuple, problem: str
) -> None:
    """A real module with one lazy import planted in it."""
    planted = (REPO / module).read_text(encoding="utf-8") + f"\n\ndef _planted():\n    {plant}\n"
    line = planted.count("\n")
    problems = back_arrows(planted, filename=module, package=package, layers=layers)
    assert problems == [f"{module}:{line} {problem}"]
