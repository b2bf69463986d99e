"""``{servers.NAME.url|host|port|metrics_url}``: what a server's command and env, and the collector's
overrides, may name of a server listed before them. Pure; settings validate with it at submit, the
job's server start checks again what only the job knows (a URL resolved from ``${oc.env:...}``).

``metrics_url`` is the server's Prometheus ``/metrics``; for a server with replicas, each replica's,
comma-separated (not the router's): what ``+dispatch_model_metrics_url`` takes, so the collector's
adaptive load reads every replica's queue (docs/servers.md, "Load that adapts").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

SERVER_REFERENCE = re.compile(r"\{servers\.([A-Za-z0-9_-]+)\.(url|host|port|metrics_url)\}")
CARRY_THE_URL = frozenset({"url", "metrics_url"})  # the references whose value holds the whole URL


def override_value(name: str, part: str, urls: Mapping[str, str]) -> str:
    """:func:`reference_value` as a collector override takes it: several replicas' URLs quoted, as a
    comma in a Hydra override is a sweep (``+k=a,b`` is refused as ambiguous, ``+k="a,b"`` is a,b)."""
    value = reference_value(name, part, urls)
    return f'"{value}"' if "," in value else value


def reference_value(name: str, part: str, urls: Mapping[str, str]) -> str:
    """The value of ``{servers.NAME.PART}``; ``urls``: the running servers' URLs by name, replicas by
    their labels (``policy-r0``) beside their router's (``policy``)."""
    url = urls[name]
    if part == "metrics_url":
        label = re.compile(rf"{re.escape(name)}-r\d+")
        replicas = sorted((k for k in urls if label.fullmatch(k)), key=lambda k: int(k.rsplit("-r", 1)[1]))
        return ",".join(f"{urls[k].rstrip('/')}/metrics" for k in replicas or [name])
    parts = urlsplit(url)
    return {"url": url, "host": parts.hostname or "", "port": str(parts.port or "")}[part]


def credential_url_on_argv(argv: list[str], urls: Mapping[str, str | None]) -> str | None:
    """Why ``argv`` may not be run: it names ``{servers.NAME.url}`` (or ``.metrics_url``, built from
    it) of a server whose URL carries a user or password (``https://user:key@host``), which a
    command line shows every user of the node (``ps``); None when it names none (pure). ``urls``:
    the earlier servers' URLs by name."""
    for part in argv:
        for name, field_name in SERVER_REFERENCE.findall(part):
            url = urls.get(name)
            if field_name in CARRY_THE_URL and url and "@" in urlsplit(url).netloc:
                reference = f"{{servers.{name}.{field_name}}}"
                return (
                    f"it names {reference} on its command line, and that URL carries a user "
                    "or password, which every user of the node can read in a command line: name it "
                    f"in the server's env instead (env: {{{name.upper()}_URL: '{reference}'}}) "
                    "and let the server read that variable"
                )
    return None


def check_references(texts: list[str], earlier: list[str], where: str) -> None:
    """Each ``{servers.NAME...}`` in ``texts`` names a server in ``earlier`` (they start in order)."""
    for text in texts:
        for name, _ in SERVER_REFERENCE.findall(text):
            if name not in earlier:
                raise ValueError(
                    f"{where} refers to {{servers.{name}...}}, which is not a server listed before it "
                    f"(servers start in order; earlier: {', '.join(earlier) or 'none'})"
                )
