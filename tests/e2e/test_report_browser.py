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

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.e2e.launcher_chains_helpers import gymslurm, only_run, wait_until_final, write_benchmark

pytestmark = pytest.mark.e2e

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--window-size=1280,1000"]  # fmt: skip


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "Chromium is not installed: as root, `apt-get install -y chromium` (test-all.sh does)"
        )
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


def test_the_console_check_sees_a_page_that_throws(tmp_path: Path) -> None:
    """The console-error check is not blind: a page whose script throws is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>throw new Error('boom')</script></body></html>")
    done = _browse(page, tmp_path / "profile", "--dump-dom")
    assert any("boom" in line for line in _console_errors(done.stderr)), done.stderr[-2000:]
