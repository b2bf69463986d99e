"""The environment each child process of a job gets (docs/security.md, "Recipes").

Each child gets only its own credentials: a value of a process's ``env`` mapping may be
``${oc.env:NAME}`` (or ``${oc.env:NAME,default}``), resolved here, inside the job, from the job's
environment — never written resolved anywhere. A credential-named variable that some process's
``env`` names this way is *withheld* from every other child: exported once at submit, it reaches
the one process that asked for it. No child receives the secrets bundle or the collector's
overrides channel. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gymslurm.errors import ConfigError
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.process_env import SECRET_OVERRIDES_ENV, SECRETS_ENV, environment_string_problem
from gymslurm.redaction import is_credential_name

_ENV_REFERENCE = re.compile(r"\$\{\s*oc\.env\s*:\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*(?:,([^}]*))?\}")


def referenced_variables(values: Iterable[str]) -> set[str]:
    """The variables named as ``${oc.env:NAME}`` in these values."""
    return {match.group(1) for value in values for match in _ENV_REFERENCE.finditer(value)}


def _holds_secret(key: str, value: str) -> set[str]:
    """The variables ``value`` names that carry a secret: credential-named ones, and every one named
    under a credential-named key (``VLLM_API_KEY: ${oc.env:POLICY}``: POLICY holds a key)."""
    names = referenced_variables([value])
    return names if is_credential_name(key) else {name for name in names if is_credential_name(name)}


def withheld_variables(env_mappings: Iterable[Mapping[str, str]]) -> frozenset[str]:
    """The secret-bearing variables some process's ``env`` names (:func:`_holds_secret`): no other
    child inherits them."""
    return frozenset(
        name for env in env_mappings for key, value in env.items() for name in _holds_secret(key, value)
    )


def withheld_in_job(settings: BenchmarkSettings) -> frozenset[str]:
    """:func:`withheld_variables` of a benchmark's processes (its collector and servers): what every
    other child of its jobs (a server, the collector, the aggregation) does not inherit."""
    return withheld_variables([settings.collector.env, *(server.env for server in settings.servers)])


def secret_values(own: Mapping[str, str], resolved: Mapping[str, str]) -> list[str]:
    """The resolved values of a process's ``env`` that are secrets: under a credential-named key, or
    read from a secret-bearing variable. The link learns them (gymslurm.redaction.remember)."""
    return [
        resolved[key] for key, value in own.items() if is_credential_name(key) or _holds_secret(key, value)
    ]


def resolve_references(value: str, environ: Mapping[str, str], where: str) -> str:
    """``value`` with each ``${oc.env:NAME[,default]}`` replaced by the variable (or its default)."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default.strip().strip("'\"")
        raise ConfigError(
            f"{where} refers to ${{oc.env:{name}}}, which is not set in this job's environment: export "
            f"{name} in the shell you submit from (sbatch passes it to the job), or give a default as "
            f"${{oc.env:{name},VALUE}}"
        )

    return _ENV_REFERENCE.sub(one, value)


def child_environment(
    environ: Mapping[str, str],
    own: Mapping[str, str],
    *,
    withheld: Iterable[str] = (),
    where: str = "env",
) -> dict[str, str]:
    """The environment of one child: the job's, less the secrets bundle, the collector's overrides
    and the variables withheld for other processes, plus its own ``env`` with references resolved."""
    mine = referenced_variables(own.values())
    dropped = {SECRETS_ENV, SECRET_OVERRIDES_ENV, *(set(withheld) - mine)}
    base = {key: value for key, value in environ.items() if key not in dropped}
    resolved = {key: resolve_references(value, environ, f"{where}.{key}") for key, value in own.items()}
    for key, value in resolved.items():  # submit checked the unresolved values; a reference may be longer
        if problem := environment_string_problem(key, value, f"{where}.{key} (resolved in the job)"):
            raise ConfigError(problem)
    return {**base, **resolved}
