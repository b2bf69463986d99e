"""``gymslurm gate`` (gymslurm/gate.py, commands/gate.py): the rule table, the policy file, the exit codes."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from gymslurm.commands.gate import main as gate_main
from gymslurm.comparison import BenchmarkRewards, ComparisonDocument, Options, compare_runs
from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode, GateExit
from gymslurm.gate import Facts, GatePolicy, Thresholds, apply_policy, decide, parse_policy

# The spec of the rule table, written out for every combination of the facts:
# (comparable, drop_too_large, significant, covered) -> decision.
EXPECTED = {
    **{(False, *rest): "warn" for rest in itertools.product((False, True), repeat=3)},
    (True, True, True, True): "block",
    (True, True, True, False): "block",  # a significant drop on what was measured is a drop
    (True, True, False, True): "warn",  # a drop beyond the allowed one that may be noise
    (True, True, False, False): "warn",
    (True, False, True, False): "warn",  # within the limit, but too few tasks to vouch for it
    (True, False, False, False): "warn",
    (True, False, True, True): "pass",  # a significant change within the allowed drop (or a gain)
    (True, False, False, True): "pass",
}


@pytest.mark.parametrize(("facts", "verdict"), sorted(EXPECTED.items()))
def test_every_combination_of_facts_has_its_decision(facts: tuple[bool, ...], verdict: str) -> None:
    """The rule table, row by row, against the decision each combination must get."""
    assert decide(Facts(*facts))[0] == verdict


def test_the_exit_codes_are_nel_gates_and_an_error_is_never_a_warning() -> None:
    """0 pass, 1 block, 2 warn (NeMo-Evaluator's), 3 an error: never the 2 other commands use for one."""
    assert (GateExit.PASS, GateExit.BLOCK, GateExit.WARN, GateExit.ERROR) == (0, 1, 2, 3)
    assert GateExit.ERROR not in (GateExit.PASS, GateExit.BLOCK, GateExit.WARN)
    assert ExitCode.REFUSED == GateExit.WARN, "why the gate's errors cannot use REFUSED"


def _side(name: str, passes: int, fails: int, others: int = 0) -> BenchmarkRewards:
    made = BenchmarkRewards(name=name, source=f"{name}.jsonl")
    for task in range(passes + fails):
        made.add(("t", str(task)), "measured", 1.0 if task < passes else 0.0)
    for task in range(others):
        made.add(("t", f"x{task}"), "failed")
    return made


def _comparison(before: tuple[int, int], after: tuple[int, int], others: int = 0) -> ComparisonDocument:
    """One benchmark "b" of 100 tasks: ``before``/``after`` = (passes, fails), ``others`` failed tasks."""
    return compare_runs(
        [_side("b", *before, others)], [_side("b", *after)], Options(resamples=300), ("A", "B")
    )


POLICY = "default:\n  max_drop: 0.02\n  alpha: 0.05\n  min_coverage: 0.9\n"
CASES = {
    "pass: identical": ((80, 20), (80, 20), 0, GateExit.PASS),
    "pass: an improvement": ((60, 40), (90, 10), 0, GateExit.PASS),
    "block: 30 of 100 tasks flipped to fail": ((90, 10), (60, 40), 0, GateExit.BLOCK),
    "warn: a 3-point drop, not significant": ((80, 20), (77, 23), 0, GateExit.WARN),
    "warn: coverage 100 of 150 tasks": ((80, 20), (80, 20), 50, GateExit.WARN),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_gate_exits_with_its_decision_on_a_saved_comparison(case: str, tmp_path: Path) -> None:
    """``gymslurm gate --policy P COMPARISON.json``: the exit code is the decision's."""
    before, after, others, code = CASES[case]
    saved = tmp_path / "comparison.json"
    saved.write_text(_comparison(before, after, others).model_dump_json())
    (tmp_path / "policy.yaml").write_text(POLICY)
    assert gate_main(["--policy", str(tmp_path / "policy.yaml"), str(saved)]) == code


ERRORS = {
    "no policy file": (None, ["comparison.json"], "does not exist"),
    "a policy that is not YAML": ("default: [\n", ["comparison.json"], "policy.yaml, line 2: not valid YAML"),
    "an unknown key": ("default:\n  max_drp: 0.1\n", ["comparison.json"], "line 2: default.max_drp"),
    "three runs": (POLICY, ["a", "b", "c"], "not 3 arguments"),
    "one argument that is not a saved comparison": (POLICY, ["run.jsonl"], "must be a saved comparison"),
    "a saved comparison of another version": (POLICY, ["future.json"], "comparison document is version 9"),
    "a flag it does not know": (POLICY, ["--frobnicate", "comparison.json"], "unrecognized arguments"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_every_error_of_the_gate_exits_3_naming_what_is_wrong(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad policy, a bad argument or a bad document exits 3 (never 2, a warning) with a message."""
    policy, argv, message = ERRORS[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "comparison.json").write_text(_comparison((8, 2), (8, 2)).model_dump_json())
    (tmp_path / "future.json").write_text('{"format_version": 9}')
    if policy is not None:
        (tmp_path / "policy.yaml").write_text(policy)
    assert gate_main(["--policy", "policy.yaml", *argv]) == GateExit.ERROR
    assert message in capsys.readouterr().err


def test_a_policy_error_names_the_users_file_and_the_line_of_each_problem() -> None:
    """Each wrong value is named by its dotted key and its line in the user's file."""
    text = (
        "default:\n  max_drop: -1\n  alpha: 0.05\n"
        "benchmarks:\n  arith:\n    alpha: '0.1'\n    min_coverage: 2\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "ci/gate.yaml")
    message = str(caught.value)
    assert message.startswith("gate policy ci/gate.yaml is invalid:")
    for where in (
        "line 2: default.max_drop",
        "line 6: benchmarks.arith.alpha",
        "line 7: benchmarks.arith.min_coverage",
    ):
        assert where in message, where


@pytest.mark.parametrize("text", ["[1, 2]\n", "just text\n"])
def test_a_policy_that_is_not_a_mapping_is_refused(text: str) -> None:
    """A list or a string is not a policy: refused at line 1, saying what a policy is."""
    with pytest.raises(ConfigError, match="line 1: a policy is a mapping"):
        parse_policy(text, "p.yaml")


def test_a_benchmarks_entry_overrides_the_default_field_by_field() -> None:
    """benchmarks.<name> over default over the built-in limits (max_drop 0, alpha 0.05, coverage 0.9)."""
    policy = parse_policy("default:\n  max_drop: 0.02\nbenchmarks:\n  arith:\n    alpha: 0.01\n", "p.yaml")
    assert policy.limits_for("arith") == Thresholds(max_drop=0.02, alpha=0.01, min_coverage=0.9)
    assert policy.limits_for("other") == Thresholds(max_drop=0.02, alpha=0.05, min_coverage=0.9)
    assert parse_policy("", "empty.yaml") == GatePolicy()


def test_the_run_takes_the_worst_decision_and_a_benchmark_of_one_side_warns() -> None:
    """Suites: a block anywhere blocks; a benchmark only one side has is a warning, never a pass."""
    good, bad = _side("good", 50, 50), _side("bad", 90, 10)
    worse = _side("bad", 40, 60)
    blocked = apply_policy(
        compare_runs([good, bad], [good, worse], Options(resamples=200), ("A", "B")), GatePolicy()
    )
    assert [d.decision for d in blocked.benchmarks] == ["pass", "block"] and blocked.exit_code == 1
    lonely = apply_policy(compare_runs([good, bad], [good], Options(resamples=200), ("A", "B")), GatePolicy())
    assert [d.decision for d in lonely.benchmarks] == ["pass", "warn"] and lonely.exit_code == 2
    assert "only the baseline has this benchmark" in lonely.benchmarks[1].reason
