"""The shape of the code, measured: lines and modules per package, the longest module and function,
`# fmt: skip` lines, the string-literal share, modules over 450 lines and functions over 80.

    python scripts/code_shape.py [--repo DIR]

Read with `ast` and `tokenize` from the files as they are on disk (DIR defaults to this checkout;
point it at another checkout, e.g. a `git worktree` of an older commit, for a before -> after
table). A module's length is its lines as `wc -l` counts them (the goals are stated that way); the
package's `lines` column counts only the non-blank ones. The string-literal share is the characters
inside string tokens (f-strings included) that are not docstrings, over all non-blank characters.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from table import format_table  # a sibling in scripts/

PACKAGES = ("sweeper", "train", "hydra_plugins", "scripts", "tests")
MODULE_LIMIT = 450
FUNCTION_LIMIT = 80
FMT_SKIP = "# fmt: " + "skip"  # spelled in two so this file does not count itself
STRING_TOKENS = {tokenize.STRING} | {
    getattr(tokenize, name)
    for name in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
    if hasattr(tokenize, name)
}


@dataclass(kw_only=True)
class Shape:
    files: int = 0
    lines: int = 0
    chars: int = 0
    string_chars: int = 0
    fmt_skip: int = 0
    longest_module: tuple[int, str] = (0, "")
    longest_function: tuple[int, str] = (0, "")
    over_modules: list[str] = field(default_factory=list)
    over_functions: list[str] = field(default_factory=list)


def docstring_lines(tree: ast.AST) -> set[int]:
    """The first line of every docstring (module, class, function)."""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        node.body[0].lineno
        for node in ast.walk(tree)
        if isinstance(node, kinds) and ast.get_docstring(node, clean=False) is not None
    }


def string_chars(source: str, docstrings: set[int]) -> int:
    """Characters inside string literals that are not docstrings: the prose the code carries."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return sum(
        len(tok.string)
        for tok in tokens
        if tok.type in STRING_TOKENS and tok.start[0] not in docstrings
    )


def functions(tree: ast.AST) -> list[tuple[int, str]]:
    """(lines, name) of every function and method, nested ones on their own."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    return [
        (node.end_lineno - node.lineno + 1, node.name)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
    ]


def measure(root: Path, package: str) -> Shape:
    shape = Shape()
    for path in sorted((root / package).rglob("*.py")):
        source = path.read_text()
        rel = str(path.relative_to(root))
        code = [line for line in source.splitlines() if line.strip()]
        shape.files += 1
        shape.lines += len(code)
        shape.chars += sum(len(line.strip()) for line in code)
        tree = ast.parse(source, filename=rel)
        shape.string_chars += string_chars(source, docstring_lines(tree))
        shape.fmt_skip += source.count(FMT_SKIP)
        module_lines = source.count("\n")
        shape.longest_module = max(shape.longest_module, (module_lines, rel))
        if module_lines > MODULE_LIMIT:
            shape.over_modules.append(f"{rel} ({module_lines})")
        for length, name in functions(tree):
            shape.longest_function = max(shape.longest_function, (length, f"{rel}:{name}"))
            if length > FUNCTION_LIMIT:
                shape.over_functions.append(f"{rel}:{name} ({length})")
    return shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    shapes = {pkg: measure(args.repo, pkg) for pkg in PACKAGES if (args.repo / pkg).is_dir()}
    rows = [
        [
            pkg,
            str(s.files),
            str(s.lines),
            f"{100 * s.string_chars / max(s.chars, 1):.1f}%",
            str(s.fmt_skip),
            f"{s.longest_module[0]} {s.longest_module[1]}",
            f"{s.longest_function[0]} {s.longest_function[1]}",
        ]
        for pkg, s in shapes.items()
    ]
    print(f"code shape of {args.repo}")
    print(
        format_table(
            [
                "package",
                "modules",
                "lines",
                "strings",
                "fmt: skip",
                "longest module",
                "longest function",
            ],
            rows,
        )
    )
    torch_free = (args.repo / "train" / "__init__.py").read_text().count("TORCH_FREE")
    print(f"TORCH_FREE mentions in train/__init__.py: {torch_free}")
    for pkg in ("sweeper", "train"):
        if pkg in shapes:
            s = shapes[pkg]
            print(f"{pkg}: modules over {MODULE_LIMIT} lines: {s.over_modules or 'none'}")
            print(f"{pkg}: functions over {FUNCTION_LIMIT} lines: {s.over_functions or 'none'}")


if __name__ == "__main__":
    main()
