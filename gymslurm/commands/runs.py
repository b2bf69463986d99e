"""Where the launcher's commands find runs by default (``--run-root``)."""

from __future__ import annotations

DEFAULT_RUN_ROOT = "gymslurm_runs"
