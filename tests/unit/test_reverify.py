"""Judge-only reverification: the review's reuse policy, separate output, and the re-grade call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gymslurm.cli import main as cli_main
from gymslurm.dispatch import Completed, Failed, Omitted
from gymslurm.errors import ConfigError
from gymslurm.reverify import (
    Regrade,
    http_regrader,
    plan_rollout,
    reverify_judge_failed,
)
from gymslurm.selection import BudgetPolicy, SavedOutcome, select_rollout
from tests.unit.test_aggregate_fixtures import ShardBuilder, companion, read_jsonl

ANSWER = {"output": [{"type": "message", "content": "4"}], "status": "completed"}


class Grader:
    """A judge over HTTP (httpx MockTransport): grades the saved answer it is sent, counts its calls."""

    def __init__(self, *, status: int = 200, fail: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = status
        self.fail = fail

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        if self.status != 200:
            return httpx.Response(self.status, text="unavailable")
        reply: dict[str, Any] = {"episode_id": body["episode_id"], "task_id": body["task"]["task_id"]}
        if self.fail:
            reply["failure"] = {
                "failure_reason": "judge down again",
                "terminal": False,
                "failure_kind": "judge_failed",
            }
        else:
            reply["result"] = {
                "reward": 1.0 if body["response"] == ANSWER else 0.0,
                "response": body["response"],
            }
        return httpx.Response(200, json=reply)

    def regrader(self, run_id: str) -> Regrade:
        client = httpx.Client(transport=httpx.MockTransport(self.handler))
        return http_regrader("http://judge", run_id, client=client)


def judge_failed(builder: ShardBuilder, rid: str, answer: Any = ANSWER) -> ShardBuilder:
    """A judge failure that kept the model's answer (or not, with ``answer=None``)."""
    return builder.failure(rid, "judge_failed", response=answer)


def source(tmp_path: Path, build: Any, rollouts: int = 1) -> Path:
    """A run built by ``build(builder)``."""
    builder = ShardBuilder(tmp_path / "run" / "out.jsonl", rollouts)
    build(builder)
    return builder.finish()


def rows(path: Path) -> list[tuple[str, int, Any]]:
    """(rollout id, attempt, reward) of every row."""
    return [(r["_ng_rollout_id"], r["_ng_attempt"], r.get("reward")) for r in read_jsonl(path)]


def test_judge_failure_with_answer_is_rejudged_and_results_carried(tmp_path: Path) -> None:
    """A saved judge-failed answer is graded again in a new attempt; completed results pass unchanged."""
    src = source(tmp_path, lambda b: judge_failed(b.result("arith-0", 0.0), "arith-1"), rollouts=2)
    grader = Grader()
    report = reverify_judge_failed(src, tmp_path / "new.jsonl", grader.regrader)
    assert rows(tmp_path / "new.jsonl") == [("arith-0", 0, 0.0), ("arith-1", 1, 1.0)]
    assert [r["response"] for r in grader.requests] == [ANSWER]
    assert (report.rejudged, report.carried) == (1, 1)
    assert read_jsonl(src)[0] == read_jsonl(tmp_path / "new.jsonl")[0]


def test_output_folder_is_created(tmp_path: Path) -> None:
    """An output in a folder that does not exist yet is written (the folder is made before grading)."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))
    reverify_judge_failed(src, tmp_path / "new" / "deeper" / "out.jsonl", Grader().regrader)
    assert rows(tmp_path / "new" / "deeper" / "out.jsonl") == [("arith-0", 1, 1.0)]


def test_judge_failed_then_interruptions_reuses_the_answer(tmp_path: Path) -> None:
    """Review case: judge_failed (answer A) → interrupted → interrupted re-judges A in attempt 3."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0").interrupt("arith-0").interrupt("arith-0"))
    grader = Grader()
    reverify_judge_failed(src, tmp_path / "new.jsonl", grader.regrader)
    assert rows(tmp_path / "new.jsonl") == [("arith-0", 3, 1.0)]
    assert grader.requests[0]["episode_id"] == {"rollout_id": "arith-0", "attempt": 3}
    assert read_jsonl(tmp_path / "new.jsonl")[0]["_ng_reverify"]["source_attempt"] == 0


def test_newer_outcome_without_answer_stops_reuse_with_warning(tmp_path: Path) -> None:
    """A newer recorded failure without an answer stops the reuse of A, with a warning; nothing written."""
    src = source(
        tmp_path,
        lambda b: judge_failed(b, "arith-0").failure("arith-0", "agent_run_error").interrupt("arith-0"),
    )
    grader = Grader()
    report = reverify_judge_failed(src, tmp_path / "new.jsonl", grader.regrader)
    assert (report.rejudged, report.stopped, grader.requests) == (0, 1, [])
    assert "stops the reuse" in report.warnings[0]
    assert not (tmp_path / "new.jsonl").exists()


def test_warning_names_the_rollout_by_id(tmp_path: Path) -> None:
    """A stopped reuse is reported with the rollout's id (what the files and the user know it by)."""
    src = source(
        tmp_path,
        lambda b: judge_failed(b, "arith-0").failure("arith-0", "agent_run_error"),
    )
    report = reverify_judge_failed(src, tmp_path / "new.jsonl", Grader().regrader)
    assert report.warnings[0].startswith("rollout 'arith-0': ")


@pytest.mark.parametrize("spelling", ["source", "source sidecar"])
def test_refusal_names_the_source_run_not_a_merged_output(tmp_path: Path, spelling: str) -> None:
    """Writing over the source run is refused with reverification's own words, not aggregation's."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))
    output = src if spelling == "source" else companion(src, "_failures.jsonl")
    with pytest.raises(ConfigError) as refused:
        reverify_judge_failed(src, output, Grader().regrader)
    message = str(refused.value)
    assert "the reverification output" in message and "source run" in message
    assert "merged output" not in message


def test_newer_judge_failure_without_answer_stops_reuse(tmp_path: Path) -> None:
    """A newer judge failure that kept no answer also stops the walk."""
    src = source(tmp_path, lambda b: judge_failed(judge_failed(b, "arith-0"), "arith-0", answer=None))
    report = reverify_judge_failed(src, tmp_path / "new.jsonl", Grader().regrader)
    assert (report.rejudged, report.stopped, report.without_answer) == (0, 1, 1)


def test_nothing_eligible_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Never a silent 'nothing to re-verify': the command explains the counts and exits 1."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0", answer=None))
    out = tmp_path / "n.jsonl"
    argv = [
        f"+input_jsonl_fpath={src}",
        f"+output_jsonl_fpath={out}",
        "+environment_server_url=http://127.0.0.1:9",
    ]
    code = cli_main(["reverify", "--judge-failed-only", *argv])
    assert code == 1
    err = capsys.readouterr().err
    assert "1 have judge failures" in err and "1 of those kept no answer" in err


def test_diagnostic_response_of_other_kinds_is_never_rejudged(tmp_path: Path) -> None:
    """A partial response saved with a non-judge failure is diagnostic only."""
    src = source(tmp_path, lambda b: b.failure("arith-0", "agent_run_error", response=ANSWER))
    assert reverify_judge_failed(src, tmp_path / "new.jsonl", Grader().regrader).rejudged == 0


def test_legacy_judge_invalid_class_is_matched(tmp_path: Path) -> None:
    """A legacy producer's judge_invalid routing class counts as a judge failure."""
    src = source(
        tmp_path, lambda b: b.failure("arith-0", None, legacy_class="judge_invalid", response=ANSWER)
    )
    assert reverify_judge_failed(src, tmp_path / "new.jsonl", Grader().regrader).rejudged == 1


def test_source_run_is_not_modified(tmp_path: Path) -> None:
    """Reverification writes no byte into the source run."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0").interrupt("arith-0"))
    before = {p.name: p.read_bytes() for p in src.parent.iterdir()}
    reverify_judge_failed(src, tmp_path / "new.jsonl", Grader().regrader)
    assert {p.name: p.read_bytes() for p in src.parent.iterdir()} == before


def test_failed_regrade_goes_to_output_sidecar_with_answer(tmp_path: Path) -> None:
    """A re-grade that fails again is saved in the output's sidecar, keeping the answer."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))
    report = reverify_judge_failed(src, tmp_path / "new.jsonl", Grader(fail=True).regrader)
    (row,) = read_jsonl(companion(tmp_path / "new.jsonl", "_failures.jsonl"))
    assert (report.regrade_failed, row["_ng_failure_class"], row["_ng_failure_response"]) == (
        1,
        "judge_failed",
        ANSWER,
    )


@pytest.mark.parametrize("spelling", ["source", "source sidecar", "unsafe_ prefix", "established run"])
def test_refuses_to_write_into_a_run(tmp_path: Path, spelling: str) -> None:
    """The output may not be the source (any spelling, unsafe_ prefix) nor an established run."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))
    other = ShardBuilder(tmp_path / "other.jsonl", 1).result("arith-0").finish()
    output = {
        "source": src,
        "source sidecar": companion(src, "_failures.jsonl"),
        "unsafe_ prefix": src.with_name("unsafe_out.jsonl"),
        "established run": other,
    }[spelling]
    grader = Grader()
    with pytest.raises(ConfigError):
        reverify_judge_failed(src, output, grader.regrader)
    assert grader.requests == []


def test_source_given_as_its_sidecar(tmp_path: Path) -> None:
    """A source named by its _failures.jsonl sidecar reads the run it belongs to."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))
    report = reverify_judge_failed(
        companion(src, "_failures.jsonl"), tmp_path / "new.jsonl", Grader().regrader
    )
    assert report.rejudged == 1


def test_exhausted_budget_is_left_alone() -> None:
    """A judge failure whose budget is exhausted is not re-judged (resubmit first)."""
    fails = [
        SavedOutcome(
            a, "failure", a, delivery="delivered", failure_kind="judge_failed", failure_class="judge_failed"
        )
        for a in range(2)
    ]
    state = select_rollout(2, fails, BudgetPolicy(max_rollout_attempts=2))
    assert plan_rollout(0, 2, fails, state, lambda line: True).action == "skip"


EPISODE = {"rollout_id": "x", "attempt": 0}
TASK = {"taskset": "t", "task_id": "1"}
FAILURE = {"failure_reason": "r", "terminal": False, "failure_kind": "judge_failed"}
REQUEST = {"episode_id": EPISODE, "task": {"task_id": TASK, "task_input": {}}, "response": ANSWER}
RUN_ID = "run-" + "0" * 32
REPLIES = [
    (
        "another rollout",
        {"episode_id": {**EPISODE, "rollout_id": "y"}, "task_id": TASK, "result": {}},
        "environment_protocol_violation",
    ),
    (
        "another attempt (stale, as for /run)",
        {"episode_id": {**EPISODE, "attempt": 9}, "task_id": TASK, "result": {}},
        "transport_peer_drop",
    ),
    (
        "neither result nor failure",
        {"episode_id": EPISODE, "task_id": TASK},
        "environment_protocol_violation",
    ),
    ("a failure", {"episode_id": EPISODE, "task_id": TASK, "failure": FAILURE}, "judge_failed"),
    ("not an object", [1], "environment_protocol_violation"),
]


def replying(reply: Any, status: int = 200) -> Regrade:
    """A regrader whose /verify always answers ``reply``."""
    transport = httpx.MockTransport(lambda request: httpx.Response(status, json=reply))
    return http_regrader("http://judge", RUN_ID, client=httpx.Client(transport=transport))


@pytest.mark.parametrize(("reply", "kind"), [r[1:] for r in REPLIES], ids=[r[0] for r in REPLIES])
def test_verify_reply_classified_like_run(reply: Any, kind: str) -> None:
    """A /verify reply that is not exactly one result for this episode is a failure of /run's kind."""
    outcome = replying(reply)(REQUEST)
    assert isinstance(outcome, Failed) and outcome.record.failure.failure_kind == kind


def test_verify_result_is_completed() -> None:
    """A /verify result for this episode is a completed outcome carrying the new grade."""
    outcome = replying({"episode_id": EPISODE, "task_id": TASK, "result": {"reward": 1.0}})(REQUEST)
    assert outcome == Completed({"reward": 1.0})


def test_verify_omission_is_omitted() -> None:
    """A bare _ng_no_persist result from /verify is an intentional omission."""
    reply = {"episode_id": EPISODE, "task_id": TASK, "result": {"_ng_no_persist": True}}
    assert replying(reply)(REQUEST) == Omitted()


@pytest.mark.parametrize(("status", "delivery"), [(503, "possibly_delivered"), (500, "delivered")])
def test_http_errors_are_failures_with_delivery(status: int, delivery: str) -> None:
    """HTTP errors from /verify become non-terminal failures with the protocol's delivery reading."""
    outcome = Grader(status=status).regrader(RUN_ID)(REQUEST)
    assert isinstance(outcome, Failed)
    assert (outcome.record.delivery, outcome.record.failure.terminal) == (delivery, False)


def test_refused_connection_is_not_sent() -> None:
    """A refused connection to the judge is a not_sent, non-terminal failure naming POST /verify."""
    outcome = http_regrader("http://127.0.0.1:9", RUN_ID, timeout_s=2.0)(REQUEST)
    assert isinstance(outcome, Failed) and outcome.record.delivery == "not_sent"
    assert "POST http://127.0.0.1:9/verify" in outcome.record.failure.failure_reason


def test_omitted_regrade_is_an_omission_row(tmp_path: Path) -> None:
    """A re-grade the server omits is written as an omission row in the output's sidecar."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))

    def regrader(run_id: str) -> Regrade:
        return lambda request: Omitted()

    report = reverify_judge_failed(src, tmp_path / "new.jsonl", regrader)
    (row,) = read_jsonl(companion(tmp_path / "new.jsonl", "_failures.jsonl"))
    assert (report.regrade_omitted, row["_ng_omitted"], row["_ng_attempt"]) == (1, True, 1)


def test_only_judge_failed_only_mode_is_supported() -> None:
    """Without --judge-failed-only the command refuses and says what is supported."""
    assert cli_main(["reverify", "+input_jsonl_fpath=a.jsonl"]) == 2


# --- every protocol; resumable ------------------------------------------------------------------


def test_a_legacy_resources_server_gets_nemo_gyms_flat_verify_request(tmp_path: Path) -> None:
    """+environment_protocol=legacy_agent: the flat row plus the saved response goes to /verify (as NeMo
    Gym's reverify posts it to a resources server), and the flat verify response is the new grade."""
    sent: list[dict[str, Any]] = []

    def resources_server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(body)
        return httpx.Response(200, json={**body, "reward": 1.0})

    client = httpx.Client(transport=httpx.MockTransport(resources_server))
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))
    report = reverify_judge_failed(
        src,
        tmp_path / "new.jsonl",
        lambda run_id: http_regrader("http://rs", run_id, client=client, protocol="legacy_agent"),
    )
    assert report.regraded_ok == 1 and rows(tmp_path / "new.jsonl") == [("arith-0", 1, 1.0)]
    assert "episode_id" not in sent[0] and sent[0]["response"] == ANSWER


def test_an_interrupted_reverify_resumes_without_judging_again(tmp_path: Path) -> None:
    """The judge's grades are journaled as they come: after an interruption the same command reuses
    them (one judge call in all for the first rollout), then publishes the output and drops the journal."""
    src = source(tmp_path, lambda b: judge_failed(judge_failed(b, "arith-0"), "arith-1"), rollouts=2)
    grader = Grader()
    calls = 0

    def dies_after_one(run_id: str) -> Regrade:
        regrade = grader.regrader(run_id)

        def once(request: dict[str, Any]) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise KeyboardInterrupt  # the job was stopped during the second judge call
            return regrade(request)

        return once

    output = tmp_path / "new.jsonl"
    with pytest.raises(KeyboardInterrupt):
        reverify_judge_failed(src, output, dies_after_one)
    assert not output.exists() and companion(output, "_reverify_progress.jsonl").exists()
    report = reverify_judge_failed(src, output, grader.regrader)
    assert report.resumed == 1 and len(grader.requests) == 2  # one before the stop, one after: never three
    assert sorted(rows(output)) == [("arith-0", 1, 1.0), ("arith-1", 1, 1.0)]
    assert not companion(output, "_reverify_progress.jsonl").exists()


def test_in_a_chain_an_unanswered_regrade_is_asked_again_and_the_output_waits(tmp_path: Path) -> None:
    """require_complete (a link of `submit --reverify`): a judge that did not answer (HTTP 503) leaves
    nothing saved for that rollout and no output; the next run grades only what is missing."""
    src = source(tmp_path, lambda b: judge_failed(judge_failed(b, "arith-0"), "arith-1"), rollouts=2)
    output, good = tmp_path / "new.jsonl", Grader()
    answers = iter([good, Grader(status=503)])

    def first_ok_then_down(run_id: str) -> Regrade:
        graders = {"arith-0": next(answers).regrader(run_id), "arith-1": next(answers).regrader(run_id)}
        return lambda request: graders[request["episode_id"]["rollout_id"]](request)

    report = reverify_judge_failed(src, output, first_ok_then_down, require_complete=True)
    assert (report.unanswered, report.regraded_ok, report.published) == (1, 1, False)
    assert not output.exists() and not companion(output, "_failures.jsonl").exists()
    again = Grader()
    report = reverify_judge_failed(src, output, again.regrader, require_complete=True)
    assert report.published and report.resumed == 1
    assert [r["episode_id"]["rollout_id"] for r in again.requests] == ["arith-1"]
    assert sorted(rows(output)) == [("arith-0", 1, 1.0), ("arith-1", 1, 1.0)]


def test_in_a_chain_nothing_eligible_still_publishes_the_carried_results(tmp_path: Path) -> None:
    """require_complete with no judge failure to re-grade: the completed results are the output."""
    src = source(tmp_path, lambda b: b.result("arith-0", 0.0))
    report = reverify_judge_failed(src, tmp_path / "new.jsonl", Grader().regrader, require_complete=True)
    assert report.published and report.rejudged == 0
    assert rows(tmp_path / "new.jsonl") == [("arith-0", 0, 0.0)]


def test_a_judges_own_failure_answer_is_an_outcome_in_a_chain(tmp_path: Path) -> None:
    """require_complete: a failure the judge answered (not a transport error) is saved, not retried."""
    src = source(tmp_path, lambda b: judge_failed(b, "arith-0"))
    grader = Grader(fail=True)
    report = reverify_judge_failed(src, tmp_path / "new.jsonl", grader.regrader, require_complete=True)
    assert report.published and report.regrade_failed == 1 and report.unanswered == 0
