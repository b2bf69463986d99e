"""A real collection never writes through a link planted at a companion (issue 10, section 3).

Symlinks planted at ``<stem>_coverage.json``, ``_aggregate_metrics.json`` and ``_health.json``
between two runs point at files of another user's choosing; a resume and ``gymslurm health``
replace the links by the run's own files and leave the link targets exactly as they were. The
output path itself may be a symlink: its target is written and the link kept (spec 000).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import collect, companion, gymslurm, write_tasks

pytestmark = pytest.mark.e2e

PLANTED = ("_coverage.json", "_aggregate_metrics.json", "_health.json")


def test_resume_and_health_replace_planted_companion_links_not_their_targets(
    tmp_path: Path, shared_demo_server
) -> None:
    """Links planted at coverage, metrics and health survive a resume and `health` with targets untouched."""
    dataset = write_tasks(tmp_path / "tasks.jsonl", [{}, {}])
    (tmp_path / "real").mkdir()
    output = tmp_path / "real" / "out.jsonl"
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(output)
    first = collect(dataset, alias, shared_demo_server.url)
    assert first.returncode == 0, first.stderr
    assert alias.is_symlink() and output.is_file()
    victims = {}
    for suffix in PLANTED:
        victim = tmp_path / f"victim{suffix}"
        victim.write_text("someone else's file\n")
        companion(output, suffix).unlink()
        companion(output, suffix).symlink_to(victim)
        victims[suffix] = victim
    again = collect(dataset, alias, shared_demo_server.url, "+resume_from_cache=true")
    assert again.returncode == 0, again.stderr
    checked = gymslurm("health", str(alias))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for suffix, victim in victims.items():
        assert victim.read_text() == "someone else's file\n", f"{suffix}: its link's target was written"
        assert not companion(output, suffix).is_symlink(), f"{suffix} is still the planted link"
    assert alias.is_symlink(), "the output's own symlink is kept"
