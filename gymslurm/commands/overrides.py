"""The overrides a command gets besides its command line: those passed in the environment."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from gymslurm.errors import ConfigError
from gymslurm.process_env import SECRET_OVERRIDES_ENV


def secret_overrides(environ: Mapping[str, str] | None = None) -> list[str]:
    """Overrides passed in the environment (a JSON list of strings), appended after the command line's.

    The channel for overrides that carry a credential: a command line is visible to every user of
    the machine (``ps``, ``/proc/*/cmdline``), a process's environment only to its owner. The chain
    step passes each credential-bearing override here (docs/security.md).
    """
    env = os.environ if environ is None else environ
    raw = env.get(SECRET_OVERRIDES_ENV)
    if not raw:
        return []
    try:
        items = json.loads(raw)
    except ValueError:
        items = None
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ConfigError(
            f"{SECRET_OVERRIDES_ENV} in the environment is not a JSON list of override strings; unset it "
            "or set it like '[\"+policy_api_key=...\"]'"
        )
    return items
