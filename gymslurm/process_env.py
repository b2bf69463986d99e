"""Environment variables through which gymslurm's own processes hand things to one another.

A contract between two processes (a link and its collector), so it stands on the ground floor
where both ends can import it without one importing the other. What each child process of a
job gets is decided in ``launcher/environment.py``.
"""

from __future__ import annotations

import os

# The collector's overrides: the link passes them here (a JSON list of strings), never on the
# collector's command line, which every user of the node can read.
SECRET_OVERRIDES_ENV = "GYMSLURM_COLLECT_OVERRIDES"
# The benchmark's secrets bundle, exported to the job; no child process receives it.
SECRETS_ENV = "GYMSLURM_SECRETS"
# NeMo Gym's failure budget, read from the environment as NeMo Gym reads it (settings.py).
MAX_ATTEMPTS_ENV = "NEMO_GYM_MAX_ROLLOUT_ATTEMPTS"

# Linux refuses to start a process with one argv or environment string longer than this
# (MAX_ARG_STRLEN: 32 pages, the NUL included): E2BIG, "Argument list too long".
MAX_ENV_STRING_BYTES = 32 * 4096


def environment_string_problem(name: str, value: str, what: str) -> str | None:
    """Why ``NAME=VALUE`` cannot be passed to a process (too long for Linux), or None. Pure.

    ``what`` says what the variable carries, for the message (never the value).
    """
    size = len(os.fsencode(name)) + len(os.fsencode(value)) + 2  # "=" and the NUL
    if size <= MAX_ENV_STRING_BYTES:
        return None
    return (
        f"{what} travels to the job's processes in the environment variable {name}, which would be "
        f"{size:,} bytes; Linux starts no process with one environment string over "
        f"{MAX_ENV_STRING_BYTES:,} bytes (MAX_ARG_STRLEN): move long values into a file the process "
        "reads (for the collector a config file, e.g. +config_paths=[...]), or shorten them"
    )
