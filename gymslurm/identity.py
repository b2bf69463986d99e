"""The configuration identity of a run: what its saved results depend on, credentials removed.

Pure but for one read: :func:`resolve` reads the environment for ``${oc.env:NAME}`` interpolations
(after the credentials were redacted, so no secret is read into the identity).

A resume must refuse when the saved results measured something else, and must not refuse because a
port, a timeout or an API key changed. So the collector keeps, beside the manifest, the *identity*:
the configuration as ``OmegaConf.to_container(cfg, resolve=False)`` gives it, put through

1. :func:`redact_credentials` — every credential becomes :data:`REDACTED` *before* interpolations
   are resolved, so a secret is never read from the environment into the identity;
2. :func:`resolve` — the remaining interpolations are resolved, except *connection references*
   (``${policy_base_url}``, ``${policy_api_key}``, ``${oc.env:POLICY_HOST}``), which stay as their
   reference string so that changing what they point at changes nothing;
3. a second redaction (a credential that reached a plain name through resolution, such as a password
   in a DSN read from ``${oc.env:DATABASE_DSN}``), :func:`drop_null_defaults`, and canonical form.

The digest of its semantic part (:func:`config_digest`) is the manifest's ``config_digest``, so
one experiment has one digest whatever its output path or ports. On resume the saved and current
identities are compared key by key (:func:`classify_differences`): *operational* keys (concurrency,
timeouts, retries, transport, endpoint addresses, output paths, reporting, tracking, dispatch and
resume controls) may change with a warning; any other difference is *semantic* and refuses the
resume. An endpoint setting that holds a connection reference keeps the reference and its URL
template in the identity, and a change of those is semantic. Unknown keys are
semantic: a false refusal costs a new output path, a false acceptance mixes two experiments.

Trade-offs: credentials are found by *name* and by a few string shapes (docs/identity.md lists
them); a secret under an arbitrary name (``llm.key``) is not recognised — the spec says so too.
Redaction errs towards redacting: a false positive only makes the identity blind to that value.
Literal task data (``task_input``, ``tasks``, ``task_params``...) is never redacted by name, because
a task's own ``api_key`` or ``port`` field is part of what is measured.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import GrammarParseError, OmegaConfBaseException
from omegaconf.grammar_parser import parse

from gymslurm.redaction import REDACTED, _table, is_credential_name, redact_text, redact_value
from gymslurm.redaction import name_words as _words
from gymslurm.redaction import opens_task_data as _opens_task_data
from gymslurm.redaction import redact_credentials as _redact_credentials
from gymslurm.redaction import referenced_name as _referenced_name
from gymslurm.redaction import rewrite_interpolations as _rewrite_interpolations

__all__ = [
    "REDACTED",
    "IdentityDiff",
    "build_identity",
    "classify_differences",
    "config_digest",
    "describe_differences",
    "drop_null_defaults",
    "identity_digest",
    "is_connection_name",
    "is_credential_name",
    "is_operational",
    "redact_credentials",
    "redact_text",
    "redact_value",
    "resolve",
    "semantic_identity",
]

# The last word of a connection endpoint's name: base_url, environment_server_urls, policy_host, port.
ENDPOINT_LAST_WORDS = _table("url urls host hostname port endpoint endpoints address")
# A name with one of these words is task data, never an endpoint or an output path (dataset_url).
DATA_WORDS = _table("data dataset datasets input inputs task tasks prompt prompts skill skills")


def _is_endpoint_name(words: list[str]) -> bool:
    """base_url, policy_host, environment_server_urls, api_base — but not dataset_url (task data)."""
    if not words or DATA_WORDS.intersection(words):
        return False
    return words[-1] in ENDPOINT_LAST_WORDS or words[-2:] == ["api", "base"]


def is_connection_name(name: object) -> bool:
    """Whether a reference to this setting or variable is a connection reference (kept unresolved)."""
    return is_credential_name(name) or _is_endpoint_name(_words(name))


def _protect_interpolation(body: str) -> str | None:
    """A connection reference is escaped, so OmegaConf leaves its reference string in place."""
    reference = _referenced_name(body)
    if reference and is_connection_name(reference[1]):
        return "\\${" + body + "}"
    return None


def redact_credentials(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``raw`` with every credential replaced by :data:`REDACTED`; idempotent.

    An OmegaConf container is first turned into plain data *unresolved*: iterating it would resolve.
    """
    if isinstance(raw, DictConfig):
        raw = OmegaConf.to_container(raw, resolve=False)  # type: ignore[assignment]
    return _redact_credentials(raw)


# --------------------------------------------------------------------------------------------------
# Resolution.
# --------------------------------------------------------------------------------------------------


def resolve(redacted: Mapping[str, Any]) -> dict[str, Any]:
    """Resolve interpolations with OmegaConf, keeping connection references as their reference strings.

    A value that cannot be resolved (an unset environment variable of an unused server, ``???``)
    stays as written: the identity records what the configuration says, the collector validates it.
    """
    try:
        config = OmegaConf.create(_map_strings(redacted, _protect_references))
    except GrammarParseError:  # rare: find the unparseable strings one by one (parsing is slow)
        config = OmegaConf.create(_map_strings(redacted, _protect))
    resolved = _plain(config)
    assert isinstance(resolved, dict)
    return resolved


def _protect_references(text: str) -> str:
    return _rewrite_interpolations(text, _protect_interpolation) if "${" in text else text


# n backslashes before "${" are written 2n+1 times to stand for themselves and a literal "${".
_LITERAL_INTERPOLATION = re.compile(r"(\\*)\$\{")


def _protect(text: str) -> str:
    """Escape connection references; a string OmegaConf cannot parse (``${oc.decode:<redacted>}``) is
    escaped whole, so it stays literal instead of failing the whole configuration."""
    if "${" not in text:
        return text
    protected = _protect_references(text)
    try:
        parse(protected)
    except GrammarParseError:
        return _LITERAL_INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", text)
    return protected


def _map_strings(value: Any, function: Callable[[str], str]) -> Any:
    if isinstance(value, Mapping):
        return {key: _map_strings(item, function) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_map_strings(item, function) for item in value]
    return function(value) if isinstance(value, str) else value


def _plain(node: Any) -> Any:
    """The resolved plain value of an OmegaConf node, child by child so one failure stays local."""
    if isinstance(node, DictConfig):
        return {key: _resolved_child(node, key) for key in node}
    if isinstance(node, ListConfig):
        return [_resolved_child(node, index) for index in range(len(node))]
    return node


def _resolved_child(parent: Any, key: Any) -> Any:
    try:
        return _plain(parent[key])
    except OmegaConfBaseException:
        return OmegaConf.to_container(parent, resolve=False)[key]  # type: ignore[index]


# --------------------------------------------------------------------------------------------------
# Null defaults, canonical form, digest.
# --------------------------------------------------------------------------------------------------


def drop_null_defaults(identity: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The identity without null settings whose default is null: there null and absent are the same.

    Elsewhere null is a value of its own (``max_turns: null`` may mean unlimited where its omission
    means 30), so it stays. ``defaults`` mirrors the identity's nesting.
    """
    out: dict[str, Any] = {}
    for key, value in identity.items():
        default = defaults.get(key, ...)
        if value is None and default is None:
            continue
        both_mappings = isinstance(value, Mapping) and isinstance(default, Mapping)
        out[key] = drop_null_defaults(value, default) if both_mappings else value
    return out


_EXACT_INT = 2**53  # floats represent every integer below this exactly; JSON readers agree up to here


def _canonical(value: Any) -> Any:
    """Sorted string keys, lists for sequences, one spelling per number (``1.0`` is ``1``)."""
    if isinstance(value, Mapping):
        return {str(key): _canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, float):
        return _canonical_float(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        return str(value)  # beyond 64 bits JSON libraries disagree; text is unambiguous
    if value is None or isinstance(value, str | int):
        return value
    return str(value)


def _canonical_float(value: float) -> float | int | str:
    if not math.isfinite(value):
        return str(value)
    return int(value) if value.is_integer() and abs(value) < _EXACT_INT else value


def build_identity(raw_config: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None) -> dict:
    """What ``<stem>_identity.json`` holds: redact → resolve → redact → drop null defaults → canonical."""
    resolved = redact_credentials(resolve(redact_credentials(raw_config)))
    if defaults is not None:
        resolved = drop_null_defaults(resolved, defaults)
    canonical = _canonical(resolved)
    assert isinstance(canonical, dict)
    return canonical


def _canonical_bytes(value: Any) -> bytes:
    return orjson.dumps(_canonical(value), option=orjson.OPT_SORT_KEYS)


def identity_digest(identity: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the identity's canonical JSON; key order does not matter."""
    return "sha256:" + hashlib.sha256(_canonical_bytes(identity)).hexdigest()


# --------------------------------------------------------------------------------------------------
# Operational vs semantic keys. Extend the tables, not the code (docs/identity.md has the rationale).
# --------------------------------------------------------------------------------------------------

# Exact names (as words joined by "_") that are operational wherever they appear.
OPERATIONAL_NAMES = frozenset(
    {
        # concurrency
        "concurrency",
        "max_concurrency",
        "num_samples_in_parallel",
        "max_concurrent_requests",
        "parallelism",
        "num_workers",
        "max_workers",
        "max_connections",
        "max_keepalive_connections",
        # transport
        "transport",
        "http2",
        "verify_ssl",
        "ssl_verify",
        "proxy",
        "proxies",
        "keepalive",
        "trust_env",
        # reporting
        "verbose",
        "quiet",
        "log_level",
        "progress",
        "progress_bar",
        "print_summary",
        # memory and dispatch
        "max_resident_tasks",
        "memory_limit",
        "keep_results_in_memory",
        "max_reply_bytes",
        "max_inflight_reply_bytes",
        # retry controls
        "max_rollout_attempts",
        "backoff",
        "backoff_s",
        "max_backoff_s",
        # resume and reporting flags
        "resume_from_cache",
        "allow_unsafe_resume",
        "require_complete",
        "route_failures_to_sidecar",
        "count_missing_rollouts_as_zero",
        "count_failure_classes_as_zero",
        "disable_health_check",
        "merge_shards",
    }
)
# Any word of the last component that makes it operational: request_timeout_s, max_retries, wandb_project.
OPERATIONAL_WORDS = _table("timeout timeouts retry retries wandb mlflow tensorboard health")
# The first word that makes it operational: dispatch_budget_s, dispatch_longest_first.
OPERATIONAL_FIRST_WORDS = _table("dispatch")
# An ancestor key that makes its whole subtree operational.
OPERATIONAL_SECTIONS = _table(
    "wandb mlflow tensorboard tracking reporting logging health health_check transport http_client retry "
    "slurm launcher capture"
)
# A key whose last word is one of these holds a mapping of addresses by name
# (environment_server_urls: {taskset: URL}): every value below it is an endpoint address.
ADDRESS_MAP_WORDS = _table("urls")
# A path-like last word ...
PATH_WORDS = _table("path fpath paths dir dirs directory folder file fname prefix")
# ... is operational only with one of these words (output_jsonl_fpath, capture_dir); input paths are semantic.
OUTPUT_PATH_WORDS = _table(
    "output outputs capture captures log logs trace traces cache checkpoint tmp temp scratch report reports "
    "result results"
)


def is_operational(dotted_key: str) -> bool:
    """Whether a change of this setting may go on with a warning (else it refuses the resume)."""
    components = dotted_key.split(".")
    if any(_opens_task_data(component) for component in components):
        return False
    if any("_".join(_words(component)) in OPERATIONAL_SECTIONS for component in components[:-1]):
        return True
    if any(_is_address_map(_words(component)) for component in components[:-1]):
        return True
    return _is_operational_name(_words(components[-1]))


def _is_address_map(words: list[str]) -> bool:
    """``environment_server_urls``: its entries (``.ts2``) are addresses, operational as the map is."""
    return bool(words) and words[-1] in ADDRESS_MAP_WORDS and _is_endpoint_name(words)


def _holds_reference(value: Any) -> bool:
    """A string the identity kept with an unresolved ``${...}``: a connection reference and its template."""
    return isinstance(value, str) and "${" in value


def _is_operational_value(dotted_key: str, *values: Any) -> bool:
    """:func:`is_operational` for a key holding these values.

    An endpoint setting is operational as an address; but when it holds a connection reference the
    identity keeps the reference name and its surrounding URL template (001), and those are semantic:
    ``${policy_base_url}/v1`` → ``${policy_base_url}/v2`` is another API, not another port.
    """
    if not is_operational(dotted_key):
        return False
    return not any(_holds_reference(value) for value in values)


def _is_operational_name(words: list[str]) -> bool:
    if not words:
        return False
    if is_credential_name("_".join(words)):  # its value is redacted: only its presence can differ
        return True
    if "_".join(words) in OPERATIONAL_NAMES or OPERATIONAL_WORDS.intersection(words):
        return True
    if words[0] in OPERATIONAL_FIRST_WORDS or _is_endpoint_name(words):
        return True
    is_output_path = words[-1] in PATH_WORDS and bool(OUTPUT_PATH_WORDS.intersection(words))
    return is_output_path and not DATA_WORDS.intersection(words)


@dataclass(frozen=True)
class IdentityDiff:
    """Dotted keys whose values differ between a saved and a current identity, split by consequence."""

    semantic: list[str] = field(default_factory=list)
    operational: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return bool(self.semantic or self.operational)


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every leaf; a list and an empty mapping are one value each."""
    if isinstance(value, Mapping) and (value or not prefix):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def classify_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> IdentityDiff:
    """Keys whose values differ (added and removed keys included), semantic and operational, sorted."""
    old, new = dict(_leaves(saved)), dict(_leaves(current))
    missing = object()
    changed = sorted(
        key
        for key in old.keys() | new.keys()
        if old.get(key, missing) is missing
        or new.get(key, missing) is missing
        or _canonical_bytes(old[key]) != _canonical_bytes(new[key])
    )
    operational = {key for key in changed if _is_operational_value(key, old.get(key), new.get(key))}
    return IdentityDiff(
        semantic=[key for key in changed if key not in operational],
        operational=[key for key in changed if key in operational],
    )


def semantic_identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The identity without its operational settings: what the results depend on, and nothing else.

    Two runs of one experiment at different output paths, ports or concurrency have the same semantic
    identity, so the same :func:`config_digest`. A mapping left empty by the removal is dropped.
    """
    return _semantic_part(identity, "")


def _semantic_part(mapping: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            part = _semantic_part(value, dotted)
            if part:
                out[key] = part
        elif not _is_operational_value(dotted, value):
            out[key] = value
    return out


def config_digest(identity: Mapping[str, Any]) -> str:
    """The manifest's ``config_digest``: the digest of the identity's semantic part only (000)."""
    return identity_digest(semantic_identity(identity))


def describe_differences(diff: IdentityDiff) -> str:
    """A message for the user: which settings differ and what to do (e.g. for IdentityMismatchError)."""
    if not diff.semantic:
        keys = ", ".join(diff.operational) or "none"
        return f"Only operational settings differ from the saved run ({keys}); they do not block a resume."
    message = (
        "The saved run at this output measured a different experiment: these semantic settings differ "
        f"from its saved identity (<stem>_identity.json beside the output): {', '.join(diff.semantic)}. "
        "Either resume with the same configuration as the saved run, or choose a new output path to "
        "evaluate the changed configuration. To reuse the saved results anyway, deliberately, add "
        "+allow_unsafe_resume=true (the run is then reported with identity_verified=false)."
    )
    if diff.operational:
        also = ", ".join(diff.operational)
        message += f" Operational settings also differ, which alone would not block: {also}."
    return message
