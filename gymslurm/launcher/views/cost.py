"""What a run costs, as ``status`` and the report say it: the cost line and the one ``sacct`` query.

The figures themselves (per chain and run, the budget, the final metrics) are
:mod:`gymslurm.launcher.run_cost`'s, which the end-of-run summary a job writes shares. Where the
cluster keeps accounting, what Slurm recorded (TRES ``gres/gpu`` × elapsed of every run of every
job, ``sacct -D``) is shown beside the ledger's figure: one more query (:func:`ask_accounting`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gymslurm.errors import SlurmError
from gymslurm.launcher.ledger import ChainState
from gymslurm.launcher.links import (
    human_gpu_hours,
)
from gymslurm.launcher.run_cost import CostSummary
from gymslurm.launcher.rundir import RunInfo
from gymslurm.site.backend import Backend
from gymslurm.site.slurm import AccountingRow, QueueRow


def cost_line(summary: CostSummary) -> str | None:
    """``GPU-hours: 3.20 GPU-h allocated (0.40 idle; Slurm recorded 3.18), budget 20 (16 %)``."""
    if not summary.gpu_hours and summary.gpu_budget is None:
        return None
    idle = human_gpu_hours(summary.gpu_hours_idle)
    text = f"GPU-hours: {human_gpu_hours(summary.gpu_hours)} allocated ({idle} idle"
    if summary.gpu_hours_slurm is not None:
        text += f"; Slurm recorded {human_gpu_hours(summary.gpu_hours_slurm)}"
    elif summary.slurm_accounting is False:
        text += "; no Slurm figure: this cluster keeps no accounting"
    elif summary.slurm_accounting is True:
        text += "; Slurm's accounting did not answer"
    text += ")"
    if summary.gpu_budget is not None:
        text += f", budget {summary.gpu_budget:g} GPU-h ({100 * (summary.budget_fraction or 0.0):.0f} % used)"
        if summary.budget_warning:
            text += " WARNING: past the warning threshold"
    return text


def ask_accounting(
    backend: Backend, states: list[ChainState], queue: Mapping[str, QueueRow], info: RunInfo
) -> tuple[dict[str, AccountingRow] | None, dict[str, float] | None]:
    """The status's one ``sacct`` query: how current jobs squeue forgot ended, and the GPU-seconds Slurm
    recorded per job (TRES ``gres/gpu`` × elapsed of every run, ``sacct -D``), None without accounting.

    Never on a run recorded without accounting. The GPU figure only where accounting is known to
    exist and the run holds GPUs: then every job of the run is asked for, in the same query.
    """
    forgotten = [s.current_job for s in states if s.current_job and s.current_job not in queue]
    gpu = info.accounting is True and info.gpus > 0
    if info.accounting is False or not (forgotten or gpu):
        return {}, None
    jobs = list(dict.fromkeys(job for state in states for job in state.jobs)) if gpu else forgotten
    try:
        rows = backend.accounting(jobs, every_run=gpu)
    except SlurmError:
        if forgotten:
            raise
        return {}, None  # the GPU figure alone: status goes on without it
    if rows is None or not gpu:
        return rows, None
    return rows, {job: row.gpu_s for job, row in rows.items()}
