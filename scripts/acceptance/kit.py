"""What travels to a GPU host, measured: the tracked code, the offline wheel kit (.whl/, built by
../shared/gpu/offline-wheels.sh) and any state file, against the host's 64 MiB."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

LIMIT_BYTES = 64 * 2**20
MIB = 2**20


@dataclass(frozen=True, kw_only=True)
class KitSize:
    code_files: int
    code_bytes: int
    kit_files: int
    kit_bytes: int
    extra_bytes: int  # state files and the like, carried beside the code

    @property
    def total_bytes(self) -> int:
        return self.code_bytes + self.kit_bytes + self.extra_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= LIMIT_BYTES

    def lines(self) -> list[str]:
        return [
            f"code    {self.code_bytes / MIB:6.2f} MiB  ({self.code_files} tracked files)",
            f"kit     {self.kit_bytes / MIB:6.2f} MiB  ({self.kit_files} wheels in .whl/)",
            f"state   {self.extra_bytes / MIB:6.2f} MiB",
            f"total   {self.total_bytes / MIB:6.2f} MiB of {LIMIT_BYTES / MIB:.0f} MiB: "
            f"{'fits' if self.fits else 'DOES NOT FIT'}",
        ]


def tracked_files(repo: Path) -> list[Path]:
    """The files git tracks in `repo` (what a copy of the tree carries); ValueError outside git."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=False)
    if out.returncode != 0:
        raise ValueError(f"{repo} is not a git checkout: {out.stderr.decode().strip()}")
    return [repo / name for name in out.stdout.decode().split("\0") if name]


def kit_size(repo: Path, *, kit_dir: Path, extra: tuple[Path, ...] = ()) -> KitSize:
    """Sizes of the tracked code, the wheels in `kit_dir` and the `extra` files."""
    code = [p for p in tracked_files(repo) if p.is_file()]
    wheels = sorted(kit_dir.glob("*.whl")) if kit_dir.is_dir() else []
    if not wheels:
        raise ValueError(
            f"no wheels in {kit_dir}: build the kit first with "
            f"`bash ../shared/gpu/offline-wheels.sh` from the repository root"
        )
    return KitSize(
        code_files=len(code),
        code_bytes=sum(p.stat().st_size for p in code),
        kit_files=len(wheels),
        kit_bytes=sum(p.stat().st_size for p in wheels),
        extra_bytes=sum(p.stat().st_size for p in extra),
    )
