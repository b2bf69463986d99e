"""``{servers.NAME.*}``: the values a reference to an earlier server takes (launcher/server_refs.py)."""

from __future__ import annotations

import pytest

from gymslurm.launcher.server_refs import credential_url_on_argv, override_value, reference_value

URLS = {
    "env": "http://127.0.0.1:9000",
    "policy": "http://a1:8000",  # the router in front of the replicas
    "policy-r0": "http://a1:8101",
    "policy-r1": "http://a2:8102",
    "policy-r10": "http://a3:8110",
    "policy-rx": "http://elsewhere:1",  # not a replica label
    "judge": "http://a4:7000/",
}

CASES = [
    ("env", "url", "http://127.0.0.1:9000"),
    ("env", "host", "127.0.0.1"),
    ("env", "port", "9000"),
    ("policy", "url", "http://a1:8000"),
    ("env", "metrics_url", "http://127.0.0.1:9000/metrics"),
    ("judge", "metrics_url", "http://a4:7000/metrics"),
    ("policy", "metrics_url", "http://a1:8101/metrics,http://a2:8102/metrics,http://a3:8110/metrics"),
]


@pytest.mark.parametrize(("name", "part", "value"), CASES, ids=[f"{c[0]}.{c[1]}" for c in CASES])
def test_a_reference_takes_the_running_servers_value(name: str, part: str, value: str) -> None:
    """url, host and port are the server's (a router's for replicas); metrics_url is every replica's
    /metrics in replica order, not the router's, or the server's own when it has no replicas."""
    assert reference_value(name, part, URLS) == value


def test_several_replicas_urls_are_quoted_in_a_collector_override() -> None:
    """A comma in a Hydra override is a sweep: several /metrics URLs are quoted, one is left as it is."""
    assert override_value("policy", "metrics_url", URLS).startswith('"http://a1:8101/metrics,')
    assert override_value("env", "metrics_url", URLS) == "http://127.0.0.1:9000/metrics"


@pytest.mark.parametrize("part", ["url", "metrics_url"])
def test_a_password_url_named_on_a_command_line_is_refused(part: str) -> None:
    """{servers.NAME.url} or .metrics_url of a URL with a password may not reach a command line (ps
    shows it every user); host and port carry no password and pass."""
    urls = {"judge": "https://user:key@judge.example:443"}
    assert credential_url_on_argv(["serve", f"--judge={{servers.judge.{part}}}"], urls)
    assert credential_url_on_argv(["serve", "--judge-host={servers.judge.host}"], urls) is None
