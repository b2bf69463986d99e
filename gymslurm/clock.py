"""The two timestamp formats gymslurm writes, in one place (both ISO-8601 UTC).

Run files of the collector (manifest, coverage, locks, reports) say seconds with ``Z``, as NeMo
Gym's files do; the launcher's records (ledgers, heartbeats, run info) say milliseconds with
``+00:00``, because links of one chain can start within the same second. Changing either changes
text already on disk, so each keeps its own name.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> str:
    """Now, to the second, ``...Z``: the collector's run files."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def utc_now_ms() -> str:
    """Now, to the millisecond, ``...+00:00``: the launcher's ledgers and heartbeats."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")
