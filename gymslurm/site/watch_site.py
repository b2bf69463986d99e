"""What ``gymslurm doctor`` says of a watch (docs/watch.md): which way of keeping it alive works here.

A watch keeps no process on a login node: its tick job queues the next one with
``sbatch --begin=now+EVERY`` and a spare ``afterany`` it, which needs only what chains need (a job
may call ``sbatch``, dependencies work).
``scrontab`` would do the same from Slurm's own crontab, but only where the site enabled it
(``ScronParameters=enable``); gymslurm uses the self-queuing job everywhere and says which of the
two the site allows. Pure: reads the ``scontrol show config`` mapping.
"""

from __future__ import annotations

from collections.abc import Mapping

from gymslurm.site.findings import Finding


def watch_rules(config: Mapping[str, str]) -> list[Finding]:
    """One finding: how a watch is kept alive on this cluster."""
    scron = config.get("ScronParameters", "(null)")
    enabled = "enable" in scron.split(",")
    allows = "scrontab is enabled too" if enabled else "scrontab is not enabled (ScronParameters)"
    return [
        Finding(
            "info",
            "watch",
            f"self-queuing tick job (sbatch --begin); {allows}",
            "gymslurm watch runs as a small CPU job that queues its next tick and a spare (afterany) "
            "itself, on every site where a job may call sbatch (as chains do); nothing stays on the "
            "login node, and any single tick job lost leaves one that runs",
        )
    ]
