"""report.html in a real headless browser (Debian's Chromium): it renders its tables and timeline, alone.

Why: the report is read days later from a copied folder or a shared filesystem, so it must need
no server, no network and no other file. A local run (two shards, two links each) writes it at the
end of every link; the test copies the page alone into a fresh folder and opens it with Chromium
(``--headless``, no sandbox, no GPU, no network features, a fresh profile): the DOM must hold the
tables and the timeline and the embedded data must have been parsed by the page's script, the
screenshot must be a non-blank PNG, and the browser's console must show no error. The console check
is shown to work on a page that throws.

Chromium is installed by launchers/test-all.sh (as root, ``apt-get install chromium``); without
it this test fails saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import gymslurm, ledger, only_run, wait_until_final, write_benchmark

pytestmark = pytest.mark.e2e

# Rows of the faulty run: enough that its last link is still collecting when the cancel is injected,
# under a loaded machine too (60 rows at 0.4 s raced it at load 20: the shard was DONE first).
ROWS = 120

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--window-size=1280,1000",
]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Chromium is not installed: as root, `apt-get install -y chromium` (test-all.sh does)")
    return found


def _browse(page: Path, profile: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    argv = [_chromium(), *FLAGS, f"--user-data-dir={profile}", *mode, page.as_uri()]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=page.parent)


def _console_errors(stderr: str) -> list[str]:
    return [
        line for line in stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)
    ]


def _png_colours(path: Path) -> tuple[int, int, int]:
    """Width, height and the number of distinct RGB(A) pixel values of a PNG (8-bit, no interlace)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8, depth
            channels = {2: 3, 6: 4}[colour]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, seen = zlib.decompress(idat), width * channels + 1, set()
    for row in range(0, height, 7):  # filtered bytes of a sample of rows: enough to tell blank from drawn
        seen.update(
            raw[row * stride + 1 + i : row * stride + 1 + i + channels]
            for i in range(0, stride - 1, channels * 5)
        )
    return width, height, len(seen)


def test_report_renders_its_tables_and_timeline_in_headless_chromium(tmp_path: Path) -> None:
    """A finished local run's report opens alone in Chromium: tables, timeline, data, no console error."""
    bench = write_benchmark(tmp_path, [{"exit": 75, "progress": 1}, {"exit": 0}])
    gymslurm("submit", str(bench), "--backend", "local", "shards=2", "aggregation.command=[/bin/true]")
    run = only_run(tmp_path)
    wait_until_final(run)
    gymslurm("status", str(run))
    written = run / "report.html"
    assert written.exists(), "gymslurm status rewrites report.html"
    alone = tmp_path / "copied" / "report.html"
    alone.parent.mkdir()
    shutil.copy(written, alone)

    dom = _browse(alone, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for element in (
        'id="shards"',
        'id="timeline"',
        'id="coverage"',
        'id="links"',
        'id="faults"',
        'class="bar"',
    ):
        assert element in dom.stdout, element
    assert 'data-rendered="2"' in dom.stdout, "the page's script parsed the embedded report data"
    assert dom.stdout.count('class="bar"') == 4, "two links per shard on the timeline"
    assert _console_errors(dom.stderr) == []
    assert "aggregation: local-" in dom.stdout and " DONE: " in dom.stdout, "the aggregation's end rewrote it"

    shot = tmp_path / "report.png"
    taken = _browse(alone, tmp_path / "profile-shot", f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    width, height, colours = _png_colours(shot)
    assert (width, height) == (1280, 1000) and colours > 8, (width, height, colours)
    assert _console_errors(taken.stderr) == []


def _faulty_benchmark(tmp: Path) -> Path:
    """The demo Environment Server (slow, one request at a time), 2 GPUs a link, the real aggregation."""
    dataset = tmp / "data.jsonl"
    gymslurm("demo-server", "--write-dataset", str(dataset), "--n", str(ROWS))
    path = tmp / "bench.yaml"
    path.write_text(
        f"dataset: {dataset}\nrun_root: {tmp / 'runs'}\nshards: 1\n"
        "servers:\n  - name: env\n"
        f"    command: [{sys.executable}, -m, gymslurm, demo-server, --host, '{{host}}', --port, '{{port}}',"
        " --latency-ms, '400']\n"
        "    health_path: /health\n    probe_interval_s: 0.5\n    probe_timeout_s: 2\n"
        "    startup_timeout_s: 60\n"
        f"collector:\n  command: [{sys.executable}, -m, gymslurm, collect]\n"
        "  overrides: [+route_failures_to_sidecar=true, +concurrency=1, +progress=none]\n"
        f"slurm:\n  python: {sys.executable}\n  gpus: 2\n"
    )
    return path


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


def _results(run: Path) -> int:
    path = run / "output/shard-000/rollouts.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _collecting(run: Path, link: int, results_over: int) -> Callable[[], bool]:
    """The shard's ``link``-th run has started its collector and the outputs passed ``results_over``."""

    def ready() -> bool:
        starts = [r for r in ledger(run) if r["kind"] == "start"]
        beat = run / "shards/000/heartbeat.json"
        if len(starts) < link or not beat.exists() or _results(run) <= results_over:
            return False
        heartbeat = json.loads(beat.read_text())
        ours = heartbeat["job_id"] == starts[link - 1]["job_id"]
        return ours and heartbeat.get("collector_pid") is not None

    return ready


def test_the_report_of_a_run_with_known_faults_shows_its_result_and_every_fault(tmp_path: Path) -> None:
    """A local run survives a collector crash, a server crash and a cancel; its report alone in Chromium
    shows the final metrics the aggregation wrote, each fault under its kind, GPU-hours and the charts."""
    gymslurm("submit", str(_faulty_benchmark(tmp_path)), "--backend", "local")
    run = only_run(tmp_path)
    _wait(_collecting(run, 1, 1), "the first link's collector to save outcomes")
    gymslurm("inject", str(run), "0", "--kind", "crash")
    _wait(_collecting(run, 2, _results(run)), "the second link's collector to save outcomes")
    gymslurm("inject", str(run), "0", "--kind", "server-crash")
    _wait(lambda: any(r.get("event") == "restarted" for r in ledger(run)), "the server's restart in place")
    _wait(_collecting(run, 2, _results(run) + 1), "outcomes after the restart")
    gymslurm("inject", str(run), "0", "--kind", "cancel")
    wait_until_final(run, timeout_s=240)
    gymslurm("status", str(run))
    merged = json.loads((run / "output/merged/rollouts_gymslurm_metrics.json").read_text())["metrics"]
    alone = tmp_path / "copied" / "report.html"
    alone.parent.mkdir()
    shutil.copy(run / "report.html", alone)

    dom = _browse(alone, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console_errors(dom.stderr) == []
    assert "not merged yet" not in dom.stdout
    assert f"<td>mean/reward</td><td>{merged['mean/reward']}</td>" in dom.stdout, "the final metrics"
    assert f"<td>coverage/measured</td><td>{ROWS}</td>" in dom.stdout
    faults = re.search(r'id="faults-total">faults survived: ([^<]*)<', dom.stdout)
    assert faults and faults.group(1) == "cancelled 1, crashed 1, retries spent 1, server restarts 1"
    assert dom.stdout.count('class="interruption"') == 2, "a mark per interruption on the coverage chart"
    for chart in ("chart-coverage", "chart-rate", "chart-gpu", "chart-rewards"):
        assert f'<svg id="{chart}"' in dom.stdout, chart
    assert re.search(r'id="gpu-total">GPU-hours: \d+\.\d\d GPU-h allocated', dom.stdout)


def test_the_console_check_sees_a_page_that_throws(tmp_path: Path) -> None:
    """The console-error check is not blind: a page whose script throws is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>throw new Error('boom')</script></body></html>")
    done = _browse(page, tmp_path / "profile", "--dump-dom")
    assert any("boom" in line for line in _console_errors(done.stderr)), done.stderr[-2000:]


def test_the_comparison_page_renders_its_table_and_chart_in_headless_chromium(tmp_path: Path) -> None:
    """``gymslurm compare A B --html PAGE`` opened alone in Chromium: the table, the chart with the
    benchmark's interval and delta, the embedded document parsed, a drawn screenshot, no console error."""
    for name, passes in (("a", 30), ("b", 18)):
        rows = [
            {
                "_ng_run_id": f"run-{name}",
                "_ng_rollout_id": f"arith-{task}",
                "task_id": {"taskset": "arith", "task_id": str(task)},
                "reward": float(task < passes),
            }
            for task in range(40)
        ]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    page = tmp_path / "copied" / "compare.html"
    page.parent.mkdir()
    gymslurm("compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--html", str(page))

    dom = _browse(page, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console_errors(dom.stderr) == []
    for element in ('id="comparison"', '<svg id="chart-compare"', 'id="zero-line"', 'class="delta"'):
        assert element in dom.stdout, element
    assert dom.stdout.count('class="interval"') == 1 and 'data-benchmarks="1"' in dom.stdout
    assert "regressed" in dom.stdout and "pass → fail" in dom.stdout

    shot = tmp_path / "compare.png"
    taken = _browse(page, tmp_path / "profile-shot", f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    width, height, colours = _png_colours(shot)
    assert (width, height) == (1280, 1000) and colours > 8, (width, height, colours)


def _pixels(path: Path) -> set[tuple[int, ...]]:
    """Every RGB value of a PNG (8-bit RGB or RGBA, no interlace), its rows unfiltered (PNG filters 0-4)."""
    data = path.read_bytes()
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
            channels = {2: 3, 6: 4}[body[9]]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, seen = zlib.decompress(idat), width * channels, set()
    above = bytearray(stride)
    for row in range(height):
        kind, line = (
            raw[row * (stride + 1)],
            bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = above[i], above[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                near = min(
                    (abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner)
                )
                line[i] = (line[i] + near[2]) & 0xFF
        seen.update(tuple(line[i : i + 3]) for i in range(0, stride, channels))
        above = line
    return seen


def test_a_report_with_a_baseline_shows_the_comparison_chart_in_headless_chromium(tmp_path: Path) -> None:
    """``gymslurm report RUN --baseline OTHER`` of two finished runs (built on disk, no server): the page
    opened alone in Chromium shows compare's table, the chart (the delta on its interval, the flips)
    near its top, drawn in the screenshot in the regression's red; no console error."""
    from tests.unit.test_report_comparison import scored_run

    baseline, candidate = scored_run(tmp_path / "a", 30), scored_run(tmp_path / "b", 18)
    gymslurm("report", str(candidate), "--baseline", str(baseline))
    alone = tmp_path / "copied" / "report.html"
    alone.parent.mkdir()
    shutil.copy(candidate / "report.html", alone)

    dom = _browse(alone, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console_errors(dom.stderr) == []
    for element in ('id="compared"', 'id="comparison"', '<svg id="chart-compare"', 'class="delta"', "↓12 ↑0"):
        assert element in dom.stdout, element
    assert dom.stdout.count('class="interval"') == 1 and "<td>-0.3000</td>" in dom.stdout
    assert 'data-rendered="1"' in dom.stdout, "the page's script parsed the embedded report data"

    shot = tmp_path / "report.png"
    taken = _browse(alone, tmp_path / "profile-shot", f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    assert _console_errors(taken.stderr) == []
    assert (198, 40, 40) in _pixels(shot), "the regressed benchmark's interval (#c62828) is on screen"
