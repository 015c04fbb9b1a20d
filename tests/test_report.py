"""
The HTML report: embedded PNGs, titles and captions, notes, the CLI and a real browser.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import subprocess

from datetime import UTC, datetime, timedelta
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from typer.testing import CliRunner

from tailkit.calibration import calibrate
from tailkit.cli import app
from tailkit.config import dump_plan, load_plan
from tailkit.ingest import ingest_paths
from tailkit.ledger import AttemptRecord, JsonlSink, Ledger
from tailkit.report import write_report
from tailkit.store import Store

from .conftest import ROOT


ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
_T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
_PNG = b"\x89PNG\r\n\x1a\n"


def _ledger(path: Path) -> Path:
    """
    Executor traces of 20 runs of two steps: hedges that win and lose, one abandoned, skips.
    """
    records = []
    for run in range(20):
        start = _T0 + timedelta(minutes=run)
        base = {"run_id": f"r{run}", "model": "gpt-4.1-mini", "started_at": start}
        key = f"r{run}-extract"
        hedged = run % 4 == 0
        records.append(AttemptRecord(
            call_id=f"{key}-0", step="extract", attempt=0, role="primary", provider="openai",
            idempotency_key=key, status="cancelled" if hedged else "ok",
            total_s=None if hedged else 2.0 + run / 10, censored_at_s=6.0 if hedged else None,
            winner=not hedged, attrs={"cutoff": "total"} if hedged else {},
            **base,  # type: ignore[arg-type]
        ))  # fmt: skip
        if hedged:
            records.append(AttemptRecord(
                call_id=f"{key}-1", step="extract", attempt=1, role="hedge", provider="google",
                idempotency_key=key, status="ok", total_s=1.5, winner=True,
                **{**base, "started_at": start + timedelta(seconds=4)},  # type: ignore[arg-type]
            ))  # fmt: skip
        key = f"r{run}-summarize"
        later = {**base, "started_at": start + timedelta(seconds=10)}
        skipped = {"action_skipped": "hedge budget spent"} if run % 5 == 0 else {}
        records.append(AttemptRecord(
            call_id=f"{key}-0", step="summarize", attempt=0, role="primary", provider="openai",
            idempotency_key=key, status="ok", total_s=3.0 + run / 5, winner=True,
            abandoned=False, attrs=skipped, **later,  # type: ignore[arg-type]
        ))  # fmt: skip
    records.append(AttemptRecord(
        call_id="r1-summarize-1", step="summarize", attempt=1, role="hedge", provider="google",
        idempotency_key="r1-summarize", status="ok", total_s=9.0, abandoned=True,
        run_id="r1", model="gpt-4.1-mini", started_at=_T0 + timedelta(seconds=80),
    ))  # fmt: skip
    with Ledger(JsonlSink(path)) as ledger:
        for record in records:
            ledger.write(record)
    return path


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, production_db: Path) -> dict[str, Path]:
    """
    Two reports from the production sample: bare (no plan, no traces), and full (both).

    The store is a copy of conftest's production store, to which the traces are added.
    """
    tmp = tmp_path_factory.mktemp("report")
    shutil.copyfile(production_db, tmp / "calls.duckdb")
    with Store.open(tmp / "calls.duckdb") as store:
        bare = write_report(store, tmp / "bare", max_routes=4)
        assert ingest_paths(store, [str(_ledger(tmp / "ledger.jsonl"))], format="trace").ok
        plan = calibrate(
            store, load_plan(ROOT / "data_samples" / "workflow.yaml"), runs=2000,
            check_runs=5000,
        ).plan  # fmt: skip
        (tmp / "plan.yaml").write_text(dump_plan(plan), encoding="utf-8")
        full = write_report(store, tmp / "full", plan=plan, title="full report")
    return {"bare": bare, "full": full, "db": tmp / "calls.duckdb", "plan": tmp / "plan.yaml"}


class _Page(HTMLParser):
    """
    Collects img sources, figure titles and captions, notes and every URL-bearing attribute.
    """

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.figures: list[dict[str, str]] = []
        self.notes: list[str] = []
        self.urls: list[str] = []
        self.scripts = 0
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "figure":
            self.figures.append({"title": "", "caption": ""})
        if tag == "img":
            self.images.append(values.get("src") or "")
        for name in ("src", "href"):
            if values.get(name) and tag != "img":
                self.urls.append(values[name] or "")
        cls = values.get("class")
        self._in = {"title": "title", "how": "caption", "note": "note"}.get(cls or "")

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "note":
            self.notes.append(data)
        elif self._in and self.figures:
            self.figures[-1][self._in] += data


def _page(index: Path) -> _Page:
    page = _Page()
    page.feed(index.read_text(encoding="utf-8"))
    return page


def _png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(_PNG)
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bare", "full"])
def test_every_image_is_an_embedded_png(reports: dict[str, Path], name: str) -> None:
    """
    Every <img> is a base64 PNG data URI of a real picture, also written next to index.html.
    """
    index = reports[name]
    page = _page(index)

    assert "index.html" == index.name
    assert page.images
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        width, height = _png_size(base64.b64decode(src[len(prefix) :], validate=True))
        assert width >= 600
        assert height >= 200
    assert len(page.images) == len(list(index.parent.glob("fig_*.png")))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bare", "full"])
def test_every_figure_has_a_title_and_a_caption(reports: dict[str, Path], name: str) -> None:
    """
    Each figure states a finding in its title and says how to read it in one sentence.
    """
    page = _page(reports[name])

    assert len(page.figures) == len(page.images)
    for figure in page.figures:
        assert len(figure["title"].strip()) > 20, figure
        assert figure["caption"].strip().endswith("."), figure
        assert figure["caption"].count(". ") == 0, figure


@pytest.mark.slow
def test_the_page_is_self_contained(reports: dict[str, Path]) -> None:
    """
    No script and no external URL: only in-page anchors and data URIs.
    """
    page = _page(reports["full"])
    text = reports["full"].read_text(encoding="utf-8")

    assert 0 == page.scripts
    assert all(url.startswith("#") for url in page.urls), page.urls
    assert not re.search(r"https?://", text)


@pytest.mark.slow
def test_sections_without_data_say_so(reports: dict[str, Path]) -> None:
    """
    Without a plan or traces, those sections are a one-line note, not an empty plot.
    """
    bare, full = _page(reports["bare"]), _page(reports["full"])

    assert [
        "No plan given: no workflow section (pass a calibrated plan).",
        "No executor traces (source 'tailkit-executor').",
    ] == bare.notes
    assert [] == full.notes
    names = {p.stem for p in reports["bare"].parent.glob("*.png")}
    assert {"fig_latency_ccdf", "fig_bucket_heatmap", "fig_fit_qq"} <= names
    assert not names & {"fig_workflow_dag", "fig_policy_ccdf", "fig_trace_hedges"}


@pytest.mark.slow
def test_plan_and_traces_add_their_figures(reports: dict[str, Path]) -> None:
    """
    A plan adds the DAG and policy comparison; traces add hedges and observed vs predicted p99.
    """
    page = _page(reports["full"])
    titles = {f["title"] for f in page.figures}
    names = {p.stem for p in reports["full"].parent.glob("*.png")}

    assert {"fig_workflow_dag", "fig_policy_ccdf", "fig_trace_hedges", "fig_trace_p99"} <= names
    hedges = next(t for t in titles if t.startswith("Hedges fired"))
    # 6 hedges over 40 logical calls (20 runs x 2 steps); 5 won, the abandoned one did not;
    # 4 summarize calls had their action skipped by the budget
    assert (
        "Hedges fired on 15% of 40 calls and won 83% of their races; "
        "1 completion abandoned, 4 actions skipped by budget or throttle"
    ) == hedges
    assert any(t.startswith("The plan misses the 90 s deadline in ") for t in titles)


@pytest.mark.slow
def test_cli_prints_the_path(reports: dict[str, Path], tmp_path: Path) -> None:
    """
    `tailkit report` writes the page and prints exactly its path on stdout, findings on stderr.
    """
    out = tmp_path / "cli"
    result = CliRunner().invoke(
        app, ["report", "--out", str(out), "--db", str(reports["db"]), "--max-routes", "2",
              "--where", "step = 'extract'"],
    )  # fmt: skip

    assert 0 == result.exit_code, result.output
    assert f"{out / 'index.html'}\n" == result.stdout
    assert result.stderr.startswith("43,516 calls in 2 of 3 routes by provider, model, filter ")


@pytest.mark.slow
def test_cli_bad_filter_is_an_error_line(reports: dict[str, Path], tmp_path: Path) -> None:
    """
    An invalid --where is one `Error:` line and exit code 1, not a traceback.
    """
    result = CliRunner().invoke(
        app, ["report", "--out", str(tmp_path), "--db", str(reports["db"]), "--where", "nope("]
    )

    assert 1 == result.exit_code
    assert result.stderr.startswith("Error: --where 'nope(' is not a valid filter: ")


def _page_errors(stderr: str) -> list[str]:
    """
    Lines of chromium's log about the page: uncaught exceptions and console errors.
    """
    return [
        line
        for line in stderr.splitlines()
        if "Uncaught" in line
        or ("CONSOLE" in line and "ERROR" in line)
        or "Failed to load resource" in line
        or "Not allowed to load local resource" in line
    ]


def _chromium() -> str:
    """
    The chromium binary, or a skip (a failure in CI, which installs it).
    """
    chromium = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (CI installs it)")
    return chromium


def _headless(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
            "--v=0", "--window-size=1400,2000", *args,
        ],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


# Added to a copy of the page (the report itself has no script): after load, every element
# that is wider than its box or sticks out of <main>, and every image that did not decode.
_LAYOUT_CHECK = """<script>
window.addEventListener('load', () => {
  const main = document.querySelector('main').getBoundingClientRect();
  const bad = [];
  for (const el of document.querySelectorAll('main *')) {
    const r = el.getBoundingClientRect();
    const name = el.tagName.toLowerCase() + ' ' + (el.textContent || '').trim().slice(0, 50);
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) bad.push('wider: ' + name);
    if (r.width > 0 && (r.left < main.left - 1 || r.right > main.right + 1)) {
      bad.push('outside main: ' + name);
    }
  }
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) bad.push('not decoded: ' + img.alt);
  }
  document.body.setAttribute('data-layout', JSON.stringify({bad, images: document.images.length}));
});
</script>"""


@pytest.mark.slow
def test_no_element_overflows_in_a_real_browser(reports: dict[str, Path], tmp_path: Path) -> None:
    """
    In headless chromium no element of the page is wider than its box or sticks out of main.
    """
    chromium = _chromium()
    page = tmp_path / "check.html"
    html = reports["full"].read_text(encoding="utf-8")
    page.write_text(html.replace("</body>", _LAYOUT_CHECK + "</body>"), encoding="utf-8")

    run = _headless(chromium, tmp_path, "--dump-dom", page.resolve().as_uri())

    assert 0 == run.returncode, run.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', run.stdout)
    assert found is not None, run.stdout[-2000:]
    layout = json.loads(unescape(found.group(1)))
    assert [] == layout["bad"]
    assert len(_page(reports["full"]).images) == layout["images"]


@pytest.mark.slow
def test_a_real_browser_renders_the_page(reports: dict[str, Path], tmp_path: Path) -> None:
    """
    Headless chromium loads index.html without console errors and takes a real screenshot.
    """
    chromium = _chromium()
    shot = tmp_path / "report.png"
    run = _headless(chromium, tmp_path, f"--screenshot={shot}", reports["full"].resolve().as_uri())

    assert 0 == run.returncode, run.stderr[-2000:]
    assert [] == _page_errors(run.stderr)
    data = shot.read_bytes()
    assert (1400, 2000) == _png_size(data)
    assert len(data) > 50_000  # text and figures, not a blank page
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "report.png")
