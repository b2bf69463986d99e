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
    "run_submitted",
    "link_failed",
    "shard_stopped",
    "budget_warning",
    "aggregation_done",
    "run_done",
    "watch_blocked",
]
NOTIFY_EVENTS: tuple[str, ...] = (
    "run_submitted",
    "link_failed",
    "shard_stopped",
    "budget_warning",
    "aggregation_done",
    "run_done",
    "watch_blocked",
)


class NotifyTarget(Strict):
    """One receiver of notifications: a webhook (JSON POST) or a command, and the events it wants.

    A webhook URL is a secret (it is the receiver's only credential): the key is ``webhook``, which
    the one redaction rule redacts everywhere; the job gets it back from its environment.
    """

    webhook: str | None = None
    format: Literal["json", "slack"] = "json"
    command: list[str] | None = None
    # The variables a command receiver gets beyond the job's plain environment: it gets no secret it
    # does not name here (``TOKEN: ${oc.env:TOKEN}``), like every child (launcher/environment.py).
    env: dict[str, str] = Field(default_factory=dict)
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_EVENTS))  # type: ignore[arg-type]
    timeout_s: float = Field(default=5.0, gt=0)
    attempts: int = Field(default=4, ge=1)

    def model_post_init(self, _context: Any) -> None:
        """Exactly one of webhook and command."""
        if (self.webhook is None) == (self.command is None):
            raise ValueError("a notify entry sets exactly one of webhook (a URL) or command (argv)")
        if self.command is not None and not self.command:
            raise ValueError("notify command must name a program")


class ContainerSettings(Strict):
    """Run a server's command in a container: Pyxis/enroot (``srun --container-image``) or Apptainer."""

    runtime: Literal["pyxis", "apptainer"]
    image: str = Field(min_length=1)
    mounts: list[str] = Field(default_factory=list)  # SRC:DST[:ro]
    gpus: bool = False  # apptainer: --nv (Pyxis sees the job's GPUs already)
    extra_args: list[str] = Field(default_factory=list)


class RouterSettings(Strict):
    """The router in front of a server's replicas (``vllm-router`` by default; docs/servers.md)."""

    command: list[str] = Field(default_factory=lambda: ["{python}", "-m", "vllm_router.launch_router"])
    policy: str = "power_of_two"  # least outstanding requests of two replicas picked at random
    extra_args: list[str] = Field(default_factory=list)
    startup_timeout_s: float = Field(default=60.0, gt=0)


def placement_problem(
    name: str, command: list[str] | None, nodes: int | None, replicas: int, worker_command: list[str] | None
) -> str | None:
    """Why a server's placement keys do not fit together, else None."""
    if command is None and (nodes is not None or replicas > 1):
        return f"server {name!r}: nodes and replicas need a command, not a url"
    if worker_command is not None and (nodes or 1) < 2:
        return f"server {name!r}: worker_command runs on node ranks >= 1: set nodes >= 2"
    return None
