"""The demo model server's --checkpoint: each checkpoint folder is its own policy (docs/watch.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymslurm.demo.model_server import checkpoint_accuracy
from gymslurm.errors import ConfigError


def test_the_accuracy_is_read_from_the_checkpoint(tmp_path: Path) -> None:
    """accuracy.txt of the folder is the policy's accuracy."""
    (tmp_path / "accuracy.txt").write_text("0.35\n")
    assert checkpoint_accuracy(tmp_path) == 0.35


@pytest.mark.parametrize(("content", "match"), [(None, "cannot read"), ("high", "is not a number")])
def test_a_checkpoint_without_a_readable_accuracy_is_refused(
    tmp_path: Path, content: str | None, match: str
) -> None:
    """A folder with no accuracy.txt, or one that holds no number, is a clear error naming the file."""
    if content is not None:
        (tmp_path / "accuracy.txt").write_text(content)
    with pytest.raises(ConfigError, match=match):
        checkpoint_accuracy(tmp_path)
