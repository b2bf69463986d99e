"""The collector's configuration pieces: server config for identity, the command line, progress text."""

from __future__ import annotations

import http.server
import io
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from gymslurm.collector.prepare import environment_config, identity_config
from gymslurm.commands.collect import main as collect_main
from gymslurm.commands.collect import split_options
from gymslurm.dispatch import fetch_environment_config, probe_health
from gymslurm.errors import ConfigError, EnvironmentUnreachableError
from gymslurm.progress import (
    BarReporter,
    Counters,
    PlainReporter,
    make_reporter,
    plain_line,
    rate_and_eta,
    summary_table,
)
from gymslurm.settings import DEFAULT_HEAD_SERVER_URL, load_settings

BASE = ["+input_jsonl_fpath=/d/in.jsonl", "+output_jsonl_fpath=/r/out.jsonl"]


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}

    def do_GET(self) -> None:
        status, body = self.routes.get(self.path, (404, b"not found"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def config_server() -> Iterator[tuple[str, dict[str, tuple[int, bytes]]]]:
    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}
    handler = type("H", (_Handler,), {"routes": routes})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # serve_forever polls for shutdown every 0.5 s by default, and shutdown() waits for that poll:
    # half a second of teardown per test. A 10 ms poll costs nothing here.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", routes
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "body",
    [b"policy:\n  model: m1\n", b'"policy:\\n  model: m1\\n"'],
    ids=["yaml", "yaml-as-json-string"],
)
def test_fetch_reads_yaml_and_nemo_gyms_json_string(config_server: tuple[str, dict], body: bytes) -> None:
    """The head server's configuration is read as YAML, also when sent as a JSON string (NeMo Gym)."""
    url, routes = config_server
    routes["/global_config_dict_yaml"] = (200, body)
    assert fetch_environment_config(url) == {"policy": {"model": "m1"}}


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (404, b"", "answered HTTP 404"),
        (200, b"", "empty or non-mapping"),
        (200, b"a: [", "did not return YAML"),
    ],
)
def test_fetch_failures_are_config_errors(
    config_server: tuple[str, dict], status: int, body: bytes, message: str
) -> None:
    """A missing, empty or broken server configuration is a ConfigError saying what to do."""
    url, routes = config_server
    routes["/global_config_dict_yaml"] = (status, body)
    with pytest.raises(ConfigError, match=message):
        fetch_environment_config(url)


def test_fetch_from_an_unreachable_server_is_retryable() -> None:
    """No server at the address: EnvironmentUnreachableError (a ConfigError, exit 1) naming the endpoint."""
    expected = "cannot read the Environment Server's configuration"
    with pytest.raises(EnvironmentUnreachableError, match=expected) as caught:
        fetch_environment_config("http://127.0.0.1:9", timeout_s=2)
    assert caught.value.exit_code == 1


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_fetch_gateway_or_not_now_answer_is_retryable(config_server: tuple[str, dict], status: int) -> None:
    """A 429/502/503/504 config answer is EnvironmentUnreachableError (exit 1, retryable), not exit 2."""
    url, routes = config_server
    routes["/global_config_dict_yaml"] = (status, b"busy")
    with pytest.raises(EnvironmentUnreachableError, match=f"answered HTTP {status}") as caught:
        fetch_environment_config(url)
    assert caught.value.exit_code == 1


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (204, True), (404, False), (503, False)])
def test_probe_health_is_true_for_2xx_only(
    config_server: tuple[str, dict], status: int, healthy: bool
) -> None:
    """probe_health is true when the health path answers 2xx, false for any other status."""
    url, routes = config_server
    routes["/health"] = (status, b"")
    assert probe_health(url, "/health", timeout_s=5) is healthy


def test_probe_health_of_an_unreachable_server_is_false() -> None:
    """probe_health is false, never an exception, when no server listens."""
    assert probe_health("http://127.0.0.1:9", "/health", timeout_s=2) is False


def test_explicit_environment_config_is_not_fetched() -> None:
    """environment_config in the settings is used as is; nothing is fetched."""
    s, _ = load_settings([*BASE, "+environment_server_url=http://h:1", "+environment_config={model: m}"])
    assert environment_config(s, lambda url: pytest.fail("fetched")) == {"model": "m"}


def _fetch_from(answers: dict[str, dict]) -> Callable[[str], dict]:
    """A fetch that answers for the given URLs; nothing listens anywhere else."""

    def fetch(url: str) -> dict:
        if url not in answers:
            raise EnvironmentUnreachableError(f"nothing listens at {url}")
        return answers[url]

    return fetch


def test_several_servers_are_asked_and_keyed_by_tasksets() -> None:
    """Without a head server each distinct server is asked; answers are keyed by the tasksets it serves."""
    s, _ = load_settings(
        [*BASE, "+environment_server_urls={a: 'http://h1:1', b: 'http://h1:1', c: 'http://h2:2'}"]
    )
    answers = {"http://h1:1": {"model": "x"}, "http://h2:2": {"model": "y"}}
    assert environment_config(s, _fetch_from(answers)) == {"a,b": {"model": "x"}, "c": {"model": "y"}}


@pytest.mark.parametrize(
    ("overrides", "sources"),
    [
        (["+environment_server_url=http://e:1"], ["http://e:1", DEFAULT_HEAD_SERVER_URL]),
        (["+environment_server_url=http://e:1", "+head_server_url=http://head:2"], ["http://head:2"]),
        (["+environment_server_urls={a: 'http://e:1'}"], ["http://e:1", DEFAULT_HEAD_SERVER_URL]),
        (["+environment_server_urls={a: 'http://e:1', b: 'http://f:1'}"], [DEFAULT_HEAD_SERVER_URL]),
    ],
)
def test_config_sources_follow_nemo_gyms_default(overrides: list[str], sources: list[str]) -> None:
    """Without +head_server_url the server itself is asked first, then NeMo Gym's default head server."""
    s, _ = load_settings([*BASE, *overrides])
    assert s.config_sources() == sources
    assert DEFAULT_HEAD_SERVER_URL == "http://127.0.0.1:11000"


def test_a_nemo_gym_environment_server_gets_its_config_from_the_default_head_server() -> None:
    """An Environment Server that does not serve the config endpoint is no error when the head server does."""
    s, _ = load_settings([*BASE, "+environment_server_url=http://e:1"])

    def fetch(url: str) -> dict:
        if url == DEFAULT_HEAD_SERVER_URL:
            return {"head": 1}
        raise ConfigError(f"{url}/global_config_dict_yaml answered HTTP 404")

    assert environment_config(s, fetch) == {"head": 1}


def test_a_server_serving_its_own_config_is_used_first() -> None:
    """A server that serves its own configuration (the demo) is used; the default head is not asked."""
    s, _ = load_settings([*BASE, "+environment_server_url=http://e:1"])
    both = _fetch_from({"http://e:1": {"demo": 1}, DEFAULT_HEAD_SERVER_URL: {"head": 1}})
    assert environment_config(s, both) == {"demo": 1}


def test_several_nemo_gym_servers_fall_back_to_the_default_head_server() -> None:
    """Several servers none of which serves the endpoint: the default head server's config is used."""
    s, _ = load_settings([*BASE, "+environment_server_urls={a: 'http://e:1', b: 'http://f:1'}"])

    def fetch(url: str) -> dict:
        if url == DEFAULT_HEAD_SERVER_URL:
            return {"head": 1}
        raise ConfigError("HTTP 404")

    assert environment_config(s, fetch) == {"head": 1}


def test_no_config_anywhere_names_head_server_url() -> None:
    """Neither the Environment Server nor the default head server has it: exit 2 naming +head_server_url."""
    s, _ = load_settings([*BASE, "+environment_server_url=http://e:1"])

    def fetch(url: str) -> dict:
        if url == DEFAULT_HEAD_SERVER_URL:
            raise EnvironmentUnreachableError("refused")
        raise ConfigError("HTTP 404")

    with pytest.raises(ConfigError, match=r"\+head_server_url=") as caught:
        environment_config(s, fetch)
    assert not isinstance(caught.value, EnvironmentUnreachableError)
    assert "http://e:1 (no configuration); http://127.0.0.1:11000 (unreachable)" in str(caught.value)


def test_an_unreachable_environment_server_stays_retryable() -> None:
    """The Environment Server is down (not up yet): retryable exit 1; the default head is not asked."""
    s, _ = load_settings([*BASE, "+environment_server_url=http://e:1"])
    with pytest.raises(EnvironmentUnreachableError, match="nothing listens at http://e:1"):
        environment_config(s, _fetch_from({DEFAULT_HEAD_SERVER_URL: {"head": 1}}))


def test_head_server_is_preferred() -> None:
    """head_server_url is where the configuration comes from when set."""
    s, _ = load_settings([*BASE, "+environment_server_url=http://h:1", "+head_server_url=http://head:2"])
    asked: list[str] = []
    environment_config(s, lambda url: asked.append(url) or {"m": 1})
    assert asked == ["http://head:2"]


def test_identity_config_fills_the_fetched_configuration() -> None:
    """The identity input is the raw config with environment_config filled in when it was null."""
    assert identity_config({"a": 1, "environment_config": None}, {"m": 2}) == {
        "a": 1,
        "environment_config": {"m": 2},
    }


def test_split_options_separates_config_options_from_overrides() -> None:
    """--config-dir/--config-name (both spellings) are options; the rest are overrides."""
    config_dir, name, overrides = split_options(["--config-dir", "/c", "--config-name=b", "+limit=1"])
    assert (config_dir, name, overrides) == (Path("/c"), "b", ["+limit=1"])


@pytest.mark.parametrize(
    ("argv", "message"), [(["--bogus"], "unknown option"), (["--config-dir"], "needs a value")]
)
def test_split_options_refuses_bad_options(argv: list[str], message: str) -> None:
    """Unknown options and options without values are ConfigErrors."""
    with pytest.raises(ConfigError, match=message):
        split_options(argv)


def test_help_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints the usage with the NeMo Gym spellings and exits 0."""
    assert collect_main(["--help"]) == 0
    assert "+resume_from_cache=true" in capsys.readouterr().out


def test_rate_and_eta_count_this_invocation_only() -> None:
    """Cached outcomes do not inflate the rate; the ETA divides what is left by the rate."""
    counters = Counters(total=100, done=60, done_before=50, started_at=0.0)
    rate, eta = rate_and_eta(counters, now=5.0)
    assert rate == 2.0 and eta == 20.0


def test_plain_line_shows_every_count() -> None:
    """A plain progress line names done, failed, omitted, in flight, rate and ETA."""
    line = plain_line(Counters(total=10, done=4, failed=1, omitted=1, in_flight=2, started_at=0.0), now=2.0)
    assert "6/10" in line and "done=4 failed=1 omitted=1 in_flight=2" in line and "rate=3.0/s" in line


def test_plain_reporter_prints_at_intervals() -> None:
    """Plain lines are printed once per interval, and once at the end."""
    stream = io.StringIO()
    reporter = PlainReporter(Counters(total=1, started_at=0.0), interval_s=10, stream=stream)
    for now in (1.0, 5.0, 11.0, 12.0):
        reporter.tick(now)
    reporter.close(13.0)
    assert stream.getvalue().count("\n") == 2


def test_auto_mode_is_plain_off_a_terminal() -> None:
    """progress=auto gives plain lines when the stream is not a TTY."""
    assert isinstance(make_reporter("auto", Counters(total=1), 30, io.StringIO()), PlainReporter)


def test_bar_shows_done_failed_omitted_in_flight_rate_and_eta() -> None:
    """The progress bar's line shows every count, the rate and the ETA."""
    stream = io.StringIO()
    reporter = BarReporter(
        Counters(total=10, done=3, failed=1, omitted=1, in_flight=2, started_at=0.0), stream
    )
    reporter.close(2.0)
    assert "3 done 1 failed 1 omitted 2 in flight  2/s  ETA 00:02" in stream.getvalue()


def test_summary_table_lists_categories_and_failure_classes() -> None:
    """The final table lists each coverage category and each failure class with its count."""
    stream = io.StringIO()
    summary_table({"expected": 7, "failed": 2, "failed_by_class": {"session_lost": 2}}, "c.json", stream)
    text = stream.getvalue()
    assert "expected" in text and "failed/session_lost" in text and "c.json" in text
