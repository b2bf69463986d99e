"""The demo-server command's pure parts: flags into a configuration, and the dataset writer."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gymslurm.demo.server import _parser, config_from_args, main, write_dataset
from gymslurm.errors import ConfigError


def test_rate_flags_become_rates_in_order() -> None:
    """--<fault>-rate flags become the rate table, zero rates left out, in RATE_ORDER."""
    args = _parser().parse_args(["--omit-rate", "0.2", "--retryable-rate", "0.1"])
    assert config_from_args(args).rates == (("retryable", 0.1), ("omit", 0.2))


def test_invalid_flags_raise_one_config_error_naming_each() -> None:
    """Every wrong flag is named in one ConfigError."""
    args = _parser().parse_args(["--accuracy", "2", "--latency-ms", "-5"])
    with pytest.raises(ConfigError, match=r"--accuracy.*--latency-ms"):
        config_from_args(args)


def test_write_dataset(tmp_path: Path) -> None:
    """write_dataset writes N JSONL rows and no temporary file is left behind."""
    path = tmp_path / "tasks.jsonl"
    write_dataset(path, 4, seed=0)
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(rows) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["tasks.jsonl"]


def test_write_dataset_needs_n(tmp_path: Path) -> None:
    """--write-dataset without --n is a ConfigError."""
    with pytest.raises(ConfigError, match="--n"):
        main(["--write-dataset", str(tmp_path / "x.jsonl")])


def test_underscored_fault_rate_flag_uses_dashes() -> None:
    """A fault with an underscore gets a dashed flag (--kill-shaped-rate)."""
    args = _parser().parse_args(["--kill-shaped-rate", "0.5"])
    assert config_from_args(args).rates == (("kill_shaped", 0.5),)
