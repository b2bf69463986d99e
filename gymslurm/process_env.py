"""Environment variables through which gymslurm's own processes hand things to one another.

A contract between two processes (a link and its collector), so it stands on the ground floor
where both ends can import it without one importing the other.
"""

from __future__ import annotations

# Overrides that carry a credential: the link passes them here (a JSON list of strings), never on
# the collector's command line, which every user of the node can read.
SECRET_OVERRIDES_ENV = "GYMSLURM_COLLECT_OVERRIDES"
