"""A checked site setting and how much it matters: what ``doctor`` and its probe job report.

Apart from both so that the probe (which runs a job) and the doctor (which reads the site's
configuration) share the shape without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["error", "warning", "ok", "info"]


@dataclass(frozen=True)
class Finding:
    """One checked setting: its value, what it means for chains, and what to do."""

    level: Level
    setting: str
    value: str
    meaning: str
    fix: str = ""
