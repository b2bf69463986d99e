"""The aggregate command: override parsing and the command end to end on store-written shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.cli import main as cli_main
from gymslurm.commands.aggregate import parse_overrides, parse_value
from gymslurm.errors import ConfigError
from tests.unit.test_aggregate_fixtures import ShardBuilder, companion, read_jsonl

VALUES = [
    ("true", True),
    ("False", False),
    ("[judge_failed, skipped]", ["judge_failed", "skipped"]),
    ("[]", []),
    ("'a b'", "a b"),
    ("/x/y.jsonl", "/x/y.jsonl"),
]


@pytest.mark.parametrize(("raw", "value"), VALUES)
def test_parse_value(raw: str, value: object) -> None:
    """Override values: booleans, lists and strings."""
    assert parse_value(raw) == value


def test_unknown_override_is_an_error() -> None:
    """An unknown +key names the keys the command takes."""
    with pytest.raises(ConfigError, match=r"\+known"):
        parse_overrides(["+nope=1"], {"known": ""})


def test_plain_arguments_are_inputs() -> None:
    """Arguments without '=' are kept apart as inputs."""
    assert parse_overrides(["a.jsonl", "+k=1"], {"k": ""}) == ({"k": "1"}, ["a.jsonl"])


def test_command_merges_and_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI merges a glob of shards (exit 0) and refuses an established run's output (exit 2)."""
    ShardBuilder(tmp_path / "s0" / "out.jsonl", 2).result("arith-0").result("arith-1", 0.0).finish()
    ShardBuilder(tmp_path / "s1" / "out.jsonl", 1).failure("arith-0", terminal=True).finish()
    merged = tmp_path / "merged.jsonl"
    code = cli_main(["aggregate", str(tmp_path / "s*" / "out.jsonl"), f"+output_jsonl_fpath={merged}"])
    assert code == 0
    assert len(read_jsonl(merged)) == 2
    assert "2 of 3 completed" in capsys.readouterr().out
    assert cli_main(["aggregate", str(merged), f"+output_jsonl_fpath={tmp_path / 's0' / 'out.jsonl'}"]) == 2
    assert companion(merged, "_aggregate_coverage.json").exists()
