"""Sections of a benchmark that stand on their own: what a run may spend (``budget``), who may read its
report (``report``), who hears about it (``notify``), and the GPUs a link's directives ask for.

Also the strict base every section of a benchmark shares (unknown keys refused, frozen), so
``settings.py`` and this module validate alike. docs/cost.md, docs/notifications.md.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """A section of a benchmark: unknown keys are refused, and it is frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_GPU_DIRECTIVE = re.compile(
    r"--(?:gres=(?:[^,\s]*,)*gpu(?::[A-Za-z0-9_.-]+)?:(\d+)|gpus(?:-per-node)?[= ](?:[A-Za-z0-9_.-]+:)?(\d+))"
)


def gpus_in_directives(lines: list[str]) -> int:
    """GPUs asked for by ``#SBATCH --gres=gpu[:type]:N`` or ``--gpus=[type:]N`` lines (0: none; pure)."""
    for line in lines:
        match = _GPU_DIRECTIVE.search(line)
        if match:
            return int(match.group(1) or match.group(2))
    return 0


class BudgetSettings(Strict):
    """What a run may spend (docs/cost.md): the chain stops with BUDGET before a link starts past it."""

    gpu_hours: float | None = Field(default=None, gt=0)
    warn_at: float = Field(default=0.8, gt=0, le=1)


class ReportSettings(Strict):
    """``report.share: group`` makes ``report.html`` (only) readable by the run folder's group."""

    share: Literal["none", "group"] = "none"


NotifyEvent = Literal[
    "run_submitted", "link_failed", "shard_stopped", "budget_warning", "aggregation_done", "run_done"
]
NOTIFY_EVENTS: tuple[str, ...] = (
    "run_submitted", "link_failed", "shard_stopped", "budget_warning", "aggregation_done", "run_done",
)  # fmt: skip


class NotifyTarget(Strict):
    """One receiver of notifications: a webhook (JSON POST) or a command, and the events it wants.

    A webhook URL is a secret (it is the receiver's only credential): the key is ``webhook``, which
    the one redaction rule redacts everywhere; the job gets it back from its environment.
    """

    webhook: str | None = None
    format: Literal["json", "slack"] = "json"
    command: list[str] | None = None
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_EVENTS))  # type: ignore[arg-type]
    timeout_s: float = Field(default=5.0, gt=0)
    attempts: int = Field(default=4, ge=1)

    def model_post_init(self, _context: Any) -> None:
        """Exactly one of webhook and command."""
        if (self.webhook is None) == (self.command is None):
            raise ValueError("a notify entry sets exactly one of webhook (a URL) or command (argv)")
        if self.command is not None and not self.command:
            raise ValueError("notify command must name a program")
