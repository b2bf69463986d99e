"""``{servers.NAME.url|host|port}``: what a server's command and env, and the collector's overrides,
may name of a server listed before them. Pure; settings validate with it at submit, the job's server
start checks again what only the job knows (a URL resolved from ``${oc.env:...}``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

SERVER_REFERENCE = re.compile(r"\{servers\.([A-Za-z0-9_-]+)\.(url|host|port)\}")


def credential_url_on_argv(argv: list[str], urls: Mapping[str, str | None]) -> str | None:
    """Why ``argv`` may not be run: it names ``{servers.NAME.url}`` of a server whose URL carries a
    user or password (``https://user:key@host``), which a command line shows every user of the
    node (``ps``); None when it names none (pure). ``urls``: the earlier servers' URLs by name."""
    for part in argv:
        for name, field_name in SERVER_REFERENCE.findall(part):
            url = urls.get(name)
            if field_name == "url" and url and "@" in urlsplit(url).netloc:
                return (
                    f"it names {{servers.{name}.url}} on its command line, and that URL carries a user "
                    "or password, which every user of the node can read in a command line: name it "
                    f"in the server's env instead (env: {{{name.upper()}_URL: '{{servers.{name}.url}}'}}) "
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
