"""Environment variables through which gymslurm's own processes hand things to one another.

A contract between two processes (a link and its collector), so it stands on the ground floor
where both ends can import it without one importing the other. What each child process of a
job gets is decided in ``launcher/job/environment.py``.
"""

from __future__ import annotations

# The collector's overrides: the link passes them here (a JSON list of strings), never on the
# collector's command line, which every user of the node can read.
SECRET_OVERRIDES_ENV = "GYMSLURM_COLLECT_OVERRIDES"
# The benchmark's secrets bundle, exported to the job; no child process receives it.
SECRETS_ENV = "GYMSLURM_SECRETS"
