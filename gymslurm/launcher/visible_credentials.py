"""Credentials on the command lines gymslurm starts: readable by every user of the node (``ps``).

A warning at submit, never a refusal: gymslurm cannot make a program read an argument from
elsewhere, but it can say which setting carries one and the environment-variable form to use.
Pure.
"""

from __future__ import annotations

import re

from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.redaction import redact_value

# ``key=${oc.env:NAME}``: a reference the program resolves from its environment, not a credential.
ENVIRONMENT_REFERENCE = re.compile(r"=\$\{oc\.env:[A-Za-z_][A-Za-z0-9_]*\}$")


def visible_credential_warnings(settings: BenchmarkSettings) -> list[str]:
    """Warnings for credentials a command gymslurm starts would carry on its command line (pure).

    Every command line is run as written (a server's, its router's and container's arguments, the
    collector's, the aggregation's, the dataset command, a notify command): gymslurm cannot make a
    program read an argument from elsewhere, so a credential there is readable by every user of the
    node (``ps``). Each warning names the environment-variable form to use instead.
    """
    found = [
        (where, argv, env)
        for index, server in enumerate(settings.servers)
        for where, argv, env in (
            (f"servers[{index}].command ({server.name})", server.command, "servers[].env"),
            (f"servers[{index}].worker_command ({server.name})", server.worker_command, "servers[].env"),
            (
                f"servers[{index}].router.extra_args ({server.name})",
                server.router.extra_args,
                "servers[].env",
            ),
            (
                f"servers[{index}].container.extra_args ({server.name})",
                server.container.extra_args if server.container else None,
                "servers[].env",
            ),
        )
    ]
    found += [
        ("collector.command", settings.collector.command, "collector.env"),
        ("aggregation.command", settings.aggregation.command, "the job's environment (export it at submit)"),
        ("dataset_command", settings.dataset_command, "the environment you submit from"),
        *(
            (f"notify[{index}].command", target.command, "notify[].env")
            for index, target in enumerate(settings.notify)
        ),
    ]
    return [
        f"{where} carries a credential on its command line, which every user of the node can read (ps, "
        f"/proc/*/cmdline); pass it as an environment variable instead, in {env} (e.g. API_KEY: "
        "${oc.env:API_KEY}), and have the program read it from its environment (docs/security.md)"
        for where, argv, env in found
        if argv and redact_value(shown := [w for w in argv if not ENVIRONMENT_REFERENCE.search(w)]) != shown
    ]
