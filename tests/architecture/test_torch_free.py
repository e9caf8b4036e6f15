"""The torch-free guard: every module of train/core/ imports no torch, and the sweeper imports
nothing else from train/ (so it can never load torch by importing a rule)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = "train.core"
CORE_MODULES = sorted(
    ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
    for p in (REPO / "train" / "core").rglob("*.py")
)
SWEEPER_SIDE = ("sweeper", "hydra_plugins")  # what runs in the sweeper's process


def _imports_torch(code: str) -> bool:
    """Whether `code`, run in a fresh interpreter at the repo root, leaves torch in sys.modules."""
    probe = f"import sys\n{code}\nsys.exit(3 if 'torch' in sys.modules else 0)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert out.returncode in (0, 3), out.stderr[-2000:]
    return out.returncode == 3


@pytest.mark.parametrize("module", CORE_MODULES)
def test_listed_module_leaves_torch_unloaded(module: str) -> None:
    assert not _imports_torch(f"import {module}"), f"{module} imports torch"


def _train_imports(path: Path) -> list[str]:
    """The train.* modules a file imports (with `from train.x import y`, y too if a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "train"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "train":
                continue
            found.append(node.module)
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if importlib.util.find_spec(node.module).submodule_search_locations and (
                    importlib.util.find_spec(name) is not None
                ):
                    found.append(name)
    return found


def _sweeper_files() -> list[Path]:
    return sorted(p for d in SWEEPER_SIDE for p in (REPO / d).rglob("*.py"))


def test_the_sweeper_imports_from_train_only_its_core() -> None:
    outside = {
        f"{path.relative_to(REPO)}: {module}"
        for path in _sweeper_files()
        for module in _train_imports(path)
        if module != CORE and not module.startswith(CORE + ".")
    }
    assert not outside, f"outside train/core/: {sorted(outside)}"


def test_importing_every_sweeper_module_leaves_torch_unloaded() -> None:
    modules = [
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for p in _sweeper_files()
    ]
    code = "\n".join(f"import {m}" for m in modules)
    assert not _imports_torch(code)
