"""Screenshot the MLflow UI's run-comparison page for a finished sweep with headless Chromium.

    python scripts/mlflow_screenshot.py --tracking-dir SWEEP_CWD --experiment STUDY
    python scripts/mlflow_screenshot.py --uri http://127.0.0.1:5000 --experiment NAME --out cmp.png

With --tracking-dir (the folder a sweep ran in: mlflow.db + mlartifacts/) a private `mlflow server`
is started on a free loopback port and stopped at the end; with --uri a running server is used.
The nested runs of the newest sweep run (or of --sweep-run) are compared. Besides the PNG, the
rendered DOM is dumped and every compared run's name must appear in it as text; the exit status
is 1 when one is missing. Chromium comes from the OS (Debian: `apt-get install -y chromium`);
nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

# allow `python scripts/mlflow_screenshot.py` from the repo root without installing the package
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

log = logging.getLogger(__name__)

CHROMIUM_NAMES = ("chromium", "chromium-browser")
# Flags for a hermetic headless run: no sandbox (containers run us as root), no GPU, and none of
# the background traffic (updates, sync, QUIC probes) that would try to reach the internet.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
# Virtual time stands still while requests are pending, so this is SPA render time, not wall time;
# the compare page of MLflow 3.17 settles within ~5 s of it, the rest is margin.
DEFAULT_BUDGET_MS = 15_000
CHROMIUM_TIMEOUT_S = 90  # a normal run takes 5-20 s on 2 busy cores
PARENT_TAG = "mlflow.parentRunId"  # mlflow/utils/mlflow_tags.py: how the UI nests runs


@dataclass(kw_only=True)
class Run:
    """The few fields of an MLflow run this script needs."""

    # the run's uuid
    run_id: str
    # the name shown in the UI (trial-000, verify-001-r1, sweep-...)
    name: str
    # the parent run's id for nested runs, None for top-level runs
    parent_id: str | None
    # epoch milliseconds, to find the newest sweep
    start_time: int


# -- REST ----------------------------------------------------------------------------------------
def rest(uri: str, endpoint: str, *, query: dict | None = None, body: dict | None = None) -> dict:
    """GET (query) or POST (JSON body) an MLflow REST endpoint; raise with the server's message."""
    url = f"{uri.rstrip('/')}/api/2.0/mlflow/{endpoint}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{endpoint}: HTTP {e.code}: {e.read().decode()[:500]}") from e


def experiment_id(uri: str, name: str) -> str:
    """The experiment named `name`, or the sweep's experiment of the study `name` (the sweeper
    names it '<study> (storage <fingerprint>)'); the newest where several storages hold it."""
    try:
        return rest(uri, "experiments/get-by-name", query={"experiment_name": name})["experiment"][
            "experiment_id"
        ]
    except RuntimeError as e:
        missing = e
    found = rest(
        uri,
        "experiments/search",
        body={
            "max_results": 1000,
            "filter": f"name LIKE '{name} (storage %'",
            "order_by": ["creation_time DESC"],
        },
    ).get("experiments", [])
    if not found:
        raise LookupError(f"experiment {name!r} not found at {uri} ({missing})")
    return found[0]["experiment_id"]


def search_runs(uri: str, exp_id: str) -> list[Run]:
    """Every run of the experiment, paging through runs/search (1000 per page is its maximum)."""
    runs, token = [], None
    while True:
        body = {"experiment_ids": [exp_id], "max_results": 1000}
        if token:
            body["page_token"] = token
        doc = rest(uri, "runs/search", body=body)
        for r in doc.get("runs", []):
            tags = {t["key"]: t["value"] for t in r.get("data", {}).get("tags", [])}
            info = r["info"]
            runs.append(
                Run(
                    run_id=info["run_id"],
                    name=info.get("run_name") or tags.get("mlflow.runName", info["run_id"]),
                    parent_id=tags.get(PARENT_TAG),
                    start_time=int(info.get("start_time", 0)),
                )
            )
        token = doc.get("next_page_token")
        if not token:
            return runs


def sweep_children(runs: list[Run], sweep_run: str | None) -> tuple[Run, list[Run]]:
    """The sweep run (by name or id, else the newest run with nested runs) and its nested runs,
    sorted by name so trial-000 comes first."""
    parents = {r.parent_id for r in runs if r.parent_id}
    if sweep_run:
        candidates = [r for r in runs if sweep_run in (r.run_id, r.name)]
    else:
        candidates = [r for r in runs if r.run_id in parents]
    if not candidates:
        what = f"a run named or with id {sweep_run!r}" if sweep_run else "a run with nested runs"
        raise LookupError(f"no sweep found: the experiment has no {what}")
    parent = max(candidates, key=lambda r: r.start_time)
    children = sorted((r for r in runs if r.parent_id == parent.run_id), key=lambda r: r.name)
    if not children:
        raise LookupError(f"sweep run {parent.name!r} ({parent.run_id}) has no nested runs")
    return parent, children


def compare_url(uri: str, run_ids: list[str], exp_ids: list[str]) -> str:
    """The UI's compare page; the route and its JSON-list query are those of MLflow 3.x
    `Routes.getCompareRunPageRoute` (server/js build: `#/compare-runs?runs=[..]&experiments=[..]`),
    percent-encoded so no shell or browser mangles the quotes."""

    def enc(ids: list[str]) -> str:
        return urllib.parse.quote(json.dumps(ids, separators=(",", ":")), safe="")

    return f"{uri.rstrip('/')}/#/compare-runs?runs={enc(run_ids)}&experiments={enc(exp_ids)}"


# -- Chromium ------------------------------------------------------------------------------------
def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def run_chromium(
    chromium: str, url: str, *mode: str, window: str, budget_ms: int
) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run in a fresh, throw-away profile, tried twice: Chromium 156 now
    and then never finishes a --screenshot (seen with budgets under ~3 s), and a second, fresh
    process does."""
    for attempt in (1, 2):
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            argv = [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={window}",
                f"--virtual-time-budget={budget_ms}",
                *mode,
                url,
            ]
            try:
                proc = subprocess.run(
                    argv, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S
                )
                break
            except subprocess.TimeoutExpired:
                log.warning("chromium hung for %d s (attempt %d of 2)", CHROMIUM_TIMEOUT_S, attempt)
    else:
        raise RuntimeError(
            f"chromium did not finish within {CHROMIUM_TIMEOUT_S} s twice; "
            "try a larger --virtual-time-budget"
        )
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


class _TextCollector(HTMLParser):
    """Text nodes outside <script>/<style>, stripped: what a reader sees on the page."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []  # in document order
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.texts.append(data.strip())


def visible_texts(html: str) -> set[str]:
    parser = _TextCollector()
    parser.feed(html)
    return set(parser.texts)


def page_text(html: str) -> str:
    """The page's text in document order, one space between text nodes. React splits a heading
    such as "Comparing 3 Runs" into several nodes, so look for phrases here, not in the set."""
    parser = _TextCollector()
    parser.feed(html)
    return " ".join(parser.texts)


# -- server --------------------------------------------------------------------------------------
@contextmanager
def tracking_server(uri: str | None, tracking_dir: Path | None) -> Iterator[str]:
    """The given server, or a private one over <tracking_dir>/mlflow.db, stopped on exit."""
    if uri:
        yield uri
        return
    assert tracking_dir is not None  # argparse requires one of the two
    # --workers 1, its own process group, waits for /health, kills the group on exit.
    from tests.servers import running_mlflow_server

    log.info("starting mlflow server over %s", tracking_dir / "mlflow.db")
    with running_mlflow_server(tracking_dir) as started:
        yield started


# -- main ----------------------------------------------------------------------------------------
def compare_page(uri: str, experiment: str, sweep_run: str | None) -> tuple[str, list[str]]:
    """The URL of a sweep's compare page (its trial runs side by side) and those runs' names."""
    exp_id = experiment_id(uri, experiment)
    parent, children = sweep_children(search_runs(uri, exp_id), sweep_run)
    url = compare_url(uri, [r.run_id for r in children], [exp_id])
    log.info("sweep run %s: comparing %d runs at %s", parent.name, len(children), url)
    return url, [r.name for r in children]


def photograph(
    chromium: str,
    url: str,
    out: Path,
    *,
    window: str = "1600,1000",
    budget_ms: int = DEFAULT_BUDGET_MS,
) -> str:
    """Write the page's PNG to `out`; return its rendered DOM. One page load for both: headless
    Chromium writes the PNG and prints the DOM once the virtual-time budget is spent, so the DOM
    we check is the page we photographed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)  # so a stale PNG can never pass for this run's
    html = run_chromium(
        chromium,
        url,
        f"--screenshot={out.resolve()}",
        "--dump-dom",
        window=window,
        budget_ms=budget_ms,
    ).stdout
    if not out.is_file():
        raise RuntimeError(f"chromium exited cleanly but wrote no screenshot at {out}")
    return html


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--tracking-dir", type=Path, help="folder with mlflow.db and mlartifacts/")
    where.add_argument("--uri", help="a running MLflow server, e.g. http://127.0.0.1:5000")
    parser.add_argument("--experiment", required=True, help="experiment (= study) name")
    parser.add_argument("--sweep-run", help="sweep run name or id (default: the newest sweep)")
    parser.add_argument("--out", type=Path, default=Path("mlflow-compare.png"), help="PNG path")
    parser.add_argument("--dom-out", type=Path, help="also save the rendered DOM here")
    parser.add_argument("--chromium", default=None, help="browser binary (default: on PATH)")
    parser.add_argument("--window-size", default="1600,1000", help="WIDTH,HEIGHT in pixels")
    parser.add_argument(
        "--virtual-time-budget", type=int, default=DEFAULT_BUDGET_MS, help="SPA render budget, ms"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    chromium = args.chromium or find_chromium()
    if not chromium:
        parser.error("no chromium on PATH; install it (Debian: apt-get install -y chromium)")
    if args.tracking_dir is not None and not (args.tracking_dir / "mlflow.db").is_file():
        parser.error(f"--tracking-dir {args.tracking_dir} has no mlflow.db; give a sweep's cwd")
    if args.virtual_time_budget < 3000:
        parser.error(f"--virtual-time-budget must be >= 3000 ms, got {args.virtual_time_budget}")

    try:
        with tracking_server(args.uri, args.tracking_dir) as uri:
            url, names = compare_page(uri, args.experiment, args.sweep_run)
            html = photograph(
                chromium, url, args.out, window=args.window_size, budget_ms=args.virtual_time_budget
            )
    except (LookupError, RuntimeError) as e:  # no experiment/sweep, server or browser trouble
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dom_out is not None:
        args.dom_out.write_text(html)
    texts = visible_texts(html)
    found = {name: name in texts for name in names}
    print(f"screenshot: {args.out.resolve()}")
    for name, ok in found.items():
        print(f"  {'found  ' if ok else 'MISSING'} {name}")
    missing = [name for name, ok in found.items() if not ok]
    if missing:
        print(f"run names missing from the rendered page: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
