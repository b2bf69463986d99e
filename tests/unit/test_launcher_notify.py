"""Notifications (launcher/notify.py): claims once per transition, attempts recorded first, real HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from gymslurm.errors import ConfigError
from gymslurm.launcher.decide import Decision
from gymslurm.launcher.ledger import BudgetsRecord, DecisionRecord, NotifyRecord
from gymslurm.launcher.notify import (
    Notifier,
    backoff_s,
    budget_event,
    chain_events,
    due,
    fold,
    headline,
    wire_body,
)
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import NotifyTarget, split_secrets, validate
from tests.run_info import run_info


class Receiver:
    """A real HTTP receiver (on loopback unless ``host`` says) that keeps every JSON body it is sent."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        bodies: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                return

        self.bodies = bodies
        self.server = HTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _free_port() -> int:
    probe = Receiver()
    port = probe.port
    probe.stop()
    return port


def _decision(job: str, decision: Decision, restart: int = 0) -> DecisionRecord:
    return DecisionRecord(
        job_id=job,
        restart_count=restart,
        end="2026-12-01T10:00:00+00:00",
        elapsed_s=1,
        slurm_state="RUNNING",
        exit_code=1,
        decision=decision,
        reason="why",
        budgets_before=BudgetsRecord(),
        budgets_after=BudgetsRecord(),
    )


def test_backoff_doubles_up_to_thirty_seconds() -> None:
    """1 s after the first failure, then 2, 4 ... never more than 30 s."""
    assert [backoff_s(n) for n in (1, 2, 3, 6, 20)] == [1, 2, 4, 30, 30]


def test_chain_events_name_each_transition_once() -> None:
    """A RETRY is a link_failed, a stop a shard_stopped with its verdict; CONTINUE says nothing."""
    events = chain_events(
        2,
        [
            _decision("1", Decision.RETRY),
            _decision("2", Decision.CONTINUE),
            _decision("3", Decision.STOP_BUDGET),
        ],
    )
    assert [(name, key) for name, key, _ in events] == [
        ("link_failed", "link_failed:2:1:0"),
        ("shard_stopped", "shard_stopped:2:3:0"),
    ]
    assert events[1][2]["verdict"] == "BUDGET"


def test_the_budget_warning_is_one_per_budget() -> None:
    """Past warn_at of the budget: one warning keyed by the budget (a raised budget can warn again)."""
    assert budget_event(7.9, 10, 0.8) is None
    warning = budget_event(8.0, 10, 0.8)
    assert warning is not None and warning[1] == "budget_warning:10" and warning[2]["fraction"] == 0.8
    assert budget_event(5, None, 0.8) is None


def test_slack_format_is_a_text_line() -> None:
    """format: slack sends Slack's incoming-webhook body: one text line."""
    body = {"event": "shard_stopped", "run": "r", "shard": 1, "verdict": "FAILED", "reason": "exit 76"}
    assert wire_body(NotifyTarget(webhook="http://x", format="slack"), body) == {
        "text": "gymslurm run r: shard 1 stopped FAILED: exit 76"
    }
    assert wire_body(NotifyTarget(webhook="http://x"), body) == body
    assert (
        headline({"event": "run_done", "run": "r", "verdicts": {"DONE": 2}})
        == "gymslurm run r done: {'DONE': 2}"
    )


def test_an_attempt_without_a_result_is_never_repeated() -> None:
    """At most once: an attempt recorded before a crash may have arrived, so it is not retried."""
    records = [
        NotifyRecord(event="e", key="k", target=0, step="claimed", body={}),
        NotifyRecord(event="e", key="k", target=0, step="attempt", attempt=1),
    ]
    targets = [NotifyTarget(webhook="http://x")]
    assert due(fold(records), targets) == []
    records.append(NotifyRecord(event="e", key="k", target=0, step="error", attempt=1, detail="HTTP 503"))
    assert [item.key for item in due(fold(records), targets)] == ["k"]


def test_a_notify_entry_is_a_webhook_or_a_command() -> None:
    """Exactly one of webhook and command; events must be known names."""
    with pytest.raises(ValueError, match="exactly one"):
        NotifyTarget()
    with pytest.raises(ValueError, match="exactly one"):
        NotifyTarget(webhook="http://x", command=["true"])
    with pytest.raises(ConfigError, match="notify"):
        validate({"name": "b", "dataset": "d", "notify": [{"webhook": "http://x", "events": ["lunch"]}]}, "b")


def test_a_webhook_url_is_a_secret_kept_out_of_the_saved_config() -> None:
    """split_secrets takes the webhook URL out of benchmark.yaml; the job gets it from its environment."""
    clean, secrets = split_secrets(
        {"notify": [{"webhook": "https://hooks.example/T0/B0/s3cr3t", "format": "slack"}]}
    )
    assert "s3cr3t" not in json.dumps(clean) and secrets == {
        "notify[0].webhook": "https://hooks.example/T0/B0/s3cr3t"
    }


def test_a_receiver_down_then_up_gets_each_event_once(tmp_path: Path) -> None:
    """A real receiver, down at the first attempt: the error is recorded, the back-off passes, the
    receiver comes up, the event arrives once; claiming it again sends nothing more."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    port = _free_port()
    started: list[Receiver] = []

    def sleep(_seconds: float) -> None:  # the back-off: the receiver comes up meanwhile
        if not started:
            started.append(Receiver(port))

    notifier = Notifier(run, [NotifyTarget(webhook=f"http://127.0.0.1:{port}/hook")], "bench", sleep=sleep)
    assert notifier.emit("shard_stopped", "shard_stopped:0:1:0", shard=0) == 1
    assert notifier.deliver(deadline_s=30) == 1
    try:
        (body,) = started[0].bodies
        assert (body["event"], body["key"], body["run"]) == ("shard_stopped", "shard_stopped:0:1:0", "run")
        assert body["id"] == "run:shard_stopped:0:1:0"  # no run.json here: the run's name stands in
        assert notifier.emit("shard_stopped", "shard_stopped:0:1:0", shard=0) == 0
        assert notifier.deliver(deadline_s=30) == 0 and len(started[0].bodies) == 1
    finally:
        started[0].stop()
    steps = [r.step for r in run.notify_ledger.read() if isinstance(r, NotifyRecord)]
    assert steps == ["claimed", "attempt", "error", "attempt", "sent"]
    assert f"{port}/hook" not in run.notify_ledger.path.read_text()


def test_a_command_receiver_gets_the_event_on_stdin(tmp_path: Path) -> None:
    """A command is run with the event's JSON on stdin and GYMSLURM_EVENT set; exit 0 is delivered."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    out = tmp_path / "events.jsonl"
    script = (
        f"import os,sys; open({str(out)!r},'a').write(os.environ['GYMSLURM_EVENT']+' '+sys.stdin.read()"
        "+'\\n')"
    )
    notifier = Notifier(run, [NotifyTarget(command=["python3", "-c", script], events=["run_done"])], "bench")
    assert notifier.emit("shard_stopped", "k1") == 0, "not an event this receiver wants"
    assert notifier.emit("run_done", "k2", verdicts={"DONE": 1}) == 1
    assert notifier.deliver(deadline_s=30) == 1
    name, body = out.read_text().split(" ", 1)
    assert name == "run_done" and json.loads(body)["verdicts"] == {"DONE": 1}


def test_a_receiver_is_given_up_after_its_attempts(tmp_path: Path) -> None:
    """A receiver that never answers is tried `attempts` times, then given up; the pass never raises."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    target = NotifyTarget(webhook=f"http://127.0.0.1:{_free_port()}/", attempts=3)
    notifier = Notifier(run, [target], "bench", sleep=lambda _s: None)
    notifier.emit("run_done", "k")
    assert notifier.deliver(deadline_s=30) == 0
    steps = [r.step for r in run.notify_ledger.read() if isinstance(r, NotifyRecord)]
    assert steps == ["claimed", "attempt", "error", "attempt", "error", "attempt", "gave_up"]


def test_a_command_receiver_gets_no_secret_it_does_not_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notify command gets neither the secrets bundle, nor the collector's overrides, nor any
    credential-named variable of the job: only what its own ``env`` names."""
    from gymslurm.process_env import SECRET_OVERRIDES_ENV, SECRETS_ENV

    monkeypatch.setenv(SECRETS_ENV, '{"servers.0.env.OPENAI_API_KEY": "sk-CANARY-bundle"}')
    monkeypatch.setenv(SECRET_OVERRIDES_ENV, '["+api_key=sk-CANARY-override"]')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-CANARY-server")
    monkeypatch.setenv("SLACK_TOKEN", "xoxb-CANARY-mine")
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    out = tmp_path / "env.json"
    script = f"import json,os; open({str(out)!r},'w').write(json.dumps(dict(os.environ)))"
    target = NotifyTarget(command=["python3", "-c", script], env={"SLACK_TOKEN": "${oc.env:SLACK_TOKEN}"})
    notifier = Notifier(run, [target], "bench")
    notifier.emit("run_done", "k")
    assert notifier.deliver(deadline_s=30) == 1
    seen = json.loads(out.read_text())
    assert seen["SLACK_TOKEN"] == "xoxb-CANARY-mine"
    leaked = [name for name, value in seen.items() if "CANARY" in value and name != "SLACK_TOKEN"]
    assert leaked == []


def test_event_ids_are_unique_across_runs_and_clusters(tmp_path: Path) -> None:
    """The same transition of two runs (two submits of one benchmark, on two clusters, or under two
    run roots with one name) gets two ids: each body's id starts with its run's random uid."""
    bodies = []
    for name in ("one", "two"):
        run = RunDir(tmp_path / name / "bench-20261201T000000Z-abcd")
        run.root.mkdir(parents=True)
        info = run_info(name=run.name, benchmark="bench", uid=uuid4().hex)
        run.info_path.write_text(info.model_dump_json())
        notifier = Notifier(run, [NotifyTarget(command=["true"])], "bench")
        notifier.emit("run_submitted", "run_submitted", shards=1)
        (claim,) = [r for r in run.notify_ledger.read() if isinstance(r, NotifyRecord)]
        bodies.append(claim.body or {})
    assert bodies[0]["key"] == bodies[1]["key"] == "run_submitted"
    assert bodies[0]["id"] != bodies[1]["id"]
