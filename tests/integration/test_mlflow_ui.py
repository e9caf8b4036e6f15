"""The MLflow UI's compare page for a real sweep, rendered by headless Chromium
(scripts/mlflow_screenshot.py): table tests for its pure helpers, and one end-to-end run
(tiny sweep -> mlflow server -> PNG + DOM) that is skipped where no chromium is installed
(Debian: `apt-get install -y chromium`)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from sweeper.tracking.names import trial_run_name
from tests.sweep_helpers import REPO, load_study, sweep_argv

SCRIPT = REPO / "scripts" / "mlflow_screenshot.py"


def load_script():
    """scripts/ is not a package: import the script's module from its file."""
    spec = importlib.util.spec_from_file_location("mlflow_screenshot", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


ms = load_script()


def run(run_id: str, name: str, parent: str | None, start: int):
    return ms.Run(run_id=run_id, name=name, parent_id=parent, start_time=start)


RUNS = [
    run("p1", "sweep-old", None, 100),
    run("a1", "trial-000", "p1", 110),
    run("p2", "sweep-new", None, 200),
    run("b2", "verify-001-r1", "p2", 230),
    run("b1", "trial-001", "p2", 220),
    run("b0", "trial-000", "p2", 210),
    run("x", "lonely", None, 300),  # newest, but not a sweep: it has no nested runs
]


@pytest.mark.parametrize(
    ("sweep_run", "parent", "children"),
    [
        (None, "p2", ["trial-000", "trial-001", "verify-001-r1"]),
        ("sweep-old", "p1", ["trial-000"]),
        ("p1", "p1", ["trial-000"]),
    ],
)
def test_sweep_children_picks_the_sweep_and_sorts_its_runs(sweep_run, parent, children) -> None:
    got_parent, got_children = ms.sweep_children(RUNS, sweep_run)
    assert got_parent.run_id == parent
    assert [r.name for r in got_children] == children


@pytest.mark.parametrize(
    ("runs", "sweep_run", "match"),
    [
        ([run("x", "lonely", None, 1)], None, "no sweep found.*nested runs"),
        (RUNS, "nope", "no sweep found.*'nope'"),
        (RUNS, "lonely", "'lonely' .* has no nested runs"),
    ],
)
def test_sweep_children_errors_name_what_is_missing(runs, sweep_run, match) -> None:
    with pytest.raises(LookupError, match=match):
        ms.sweep_children(runs, sweep_run)


def test_compare_url_is_the_ui_route_with_json_lists() -> None:
    url = ms.compare_url("http://127.0.0.1:5000/", ["r1", "r2"], ["7"])
    base, fragment = url.split("#", 1)
    assert base == "http://127.0.0.1:5000/"
    route, query = fragment.split("?", 1)
    assert route == "/compare-runs"
    params = urllib.parse.parse_qs(query)
    assert json.loads(params["runs"][0]) == ["r1", "r2"]
    assert json.loads(params["experiments"][0]) == ["7"]
    assert '"' not in url and " " not in url  # percent-encoded, safe on a command line


@pytest.mark.parametrize(
    ("html", "texts"),
    [
        ("<td><span> trial-000 </span></td>", {"trial-000"}),
        ("<script>var n='trial-000'</script><p>x</p>", {"x"}),
        ('<a title="trial-000">run</a>', {"run"}),  # attributes are not visible text
    ],
)
def test_visible_texts_keeps_only_rendered_text(html, texts) -> None:
    assert ms.visible_texts(html) == texts


def test_page_text_keeps_document_order_across_split_nodes() -> None:
    # how React renders the compare page's heading: one phrase, three text nodes
    html = "<h2>Comparing <!-- -->3<!-- --> Runs from 1 Experiment</h2><p>Scatter Plot</p>"
    assert re.search(r"Comparing\s+3\s+Runs", ms.page_text(html))
    assert ms.page_text(html).endswith("Scatter Plot")


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="no `chromium` binary on PATH (Debian: apt-get install -y chromium)",
)
def test_compare_page_screenshot_shows_the_trial_runs(tmp_path: Path) -> None:
    from matplotlib import image as mpimg

    # The sweep must log to the SQLite file in its cwd, not to a server the caller configured.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONUNBUFFERED"] = "1"

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    run(
        sweep_argv(
            "search=smoke",
            "hydra.sweeper.study_name=ui-smoke",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.verify.top_k=1",
            "hydra.sweeper.verify.repeats=1",
        )
    )
    assert (tmp_path / "mlflow.db").is_file()

    png, dom = tmp_path / "shots" / "compare.png", tmp_path / "shots" / "compare.html"
    where = ["--tracking-dir", str(tmp_path), "--experiment", "ui-smoke"]
    shot = run([sys.executable, str(SCRIPT), *where, "--out", str(png), "--dom-out", str(dom)])
    # the two trials that ran (a point the sampler proposed again is recorded, not run or logged)
    study = load_study(tmp_path, "ui-smoke")
    ran = [t.number for t in study.trials if "duplicate_of" not in t.user_attrs]
    assert len(ran) == 2
    for name in (trial_run_name(n, "search", None) for n in ran):
        assert f"found   {name}" in shot.stdout
        assert name in ms.visible_texts(dom.read_text())
    assert str(png.resolve()) in shot.stdout

    pixels = mpimg.imread(png)  # PNG -> float RGB(A) in [0, 1]
    assert pixels.shape[:2] == (1000, 1600)  # --window-size=1600,1000
    assert pixels[..., :3].std() > 0.05  # a rendered page, not a blank canvas
    # every nested run: the search trials that ran and the race's verification runs (one round
    # of the top 1 and the starting config: 1 run when they are the same config, else 2)
    verify_runs = sum(len(r) for r in study.user_attrs["race"]["rounds"])
    assert verify_runs in (1, 2)
    expected = len(ran) + verify_runs
    assert re.search(rf"Comparing\s+{expected}\s+Runs", ms.page_text(dom.read_text()))
