"""scripts/bench/region_size.py: regions of k blocks against the whole model, in one process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.bench.region_size import main, rotation
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "index,order",
    [
        (0, ["model", "1", "4"]),
        (1, ["4", "1", "model"]),  # reversed
        (2, ["1", "4", "model"]),  # rotated by one
        (3, ["model", "4", "1"]),
    ],
)
def test_each_round_pair_rotates_the_arms_and_its_second_reverses_them(
    index: int, order: list[str]
) -> None:
    assert rotation(index, ["model", "1", "4"]) == order


@pytest.mark.parametrize("n", [2, 3, 6])
def test_every_arm_takes_every_place_equally_often(n: int) -> None:
    arms = [str(i) for i in range(n)]
    orders = [rotation(i, arms) for i in range(2 * n)]
    for place in range(n):
        assert sorted(order[place] for order in orders) == sorted(arms * 2)


def test_a_region_size_that_does_not_divide_the_depth_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["--sizes", "3", "--n-layer", "4"])
    assert refused.value.code == 2
    assert "--sizes: 3 blocks per region must divide --n-layer 4" in capsys.readouterr().err


@pytest.mark.slow
def test_the_benchmark_prints_a_measured_row_per_arm(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    args = ["--sizes", "1", "2", "--n-layer", "2", "--rounds", "2", "--grad-accum", "1"]
    out = tmp_path / "out.txt"
    proc = run_cli(
        "scripts.bench.region_size",
        [*args, "--out", str(out)],
        cwd=REPO,
        timeout=600,
        extra_env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^  (model|\d per region) +(\d+) +([0-9.]+)ms  (.*)$", proc.stdout, re.M)
    assert [(arm, int(calls)) for arm, calls, *_ in rows] == [
        ("model", 1),
        ("1 per region", 2),
        ("2 per region", 1),
    ]
    assert all(float(step) > 0 for _, _, step, _ in rows)
    ratios = [r for *_, r in rows[1:]]
    assert all(re.fullmatch(r"[0-9.]+ \([0-9.]+-[0-9.]+\)", r) for r in ratios), ratios
    assert out.read_text().strip() == proc.stdout.strip()
