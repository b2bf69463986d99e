"""Where ``launchers/vllm_tiny_model.py --into`` puts the tiny model (``install``), without torch.

Why: the model cache is shared by every checkout on the machine, and a vLLM of another checkout
may be serving from any ``tiny-llama-*`` directory while this one builds (vllm-up.sh used to
``rm -rf tiny-llama-*`` first). The placement is tested here with a build that writes two files in
place of the tokenizer and weights: what is checked is where and when the directory appears.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BUILDER = Path(__file__).resolve().parents[2] / "launchers" / "vllm_tiny_model.py"
DIGEST = "ab" * 32


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_tiny_model", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tiny = _builder()


def _build(out: Path) -> None:
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"weights")
    (out / "model.safetensors").chmod(0o600)  # as safetensors writes it


def _whole(model: Path) -> bool:
    return (model / tiny.MARKER).read_text().strip() == DIGEST


def test_the_model_is_named_by_the_builders_digest_and_marked_whole(tmp_path: Path) -> None:
    """The model lands in ``tiny-llama-<12 hex of the digest>``, every file there and the marker last."""
    model = tiny.install(tmp_path, DIGEST, _build)
    assert model == tmp_path / f"tiny-llama-{DIGEST[:12]}"
    assert sorted(p.name for p in model.iterdir()) == [tiny.MARKER, "config.json", "model.safetensors"]
    assert _whole(model)


def test_every_user_can_read_the_model(tmp_path: Path) -> None:
    """The folder is 0755 and every file 0644, the weights too (written 0600): a Slurm job of
    another user loads it."""
    model = tiny.install(tmp_path, DIGEST, _build)
    modes = {p.name: p.stat().st_mode & 0o777 for p in [model, *model.iterdir()]}
    assert modes == {model.name: 0o755, tiny.MARKER: 0o644, "config.json": 0o644, "model.safetensors": 0o644}


def test_a_whole_model_is_reused_not_built_again(tmp_path: Path) -> None:
    """A second install finds the marked model and does not build (the same directory, untouched)."""
    model = tiny.install(tmp_path, DIGEST, _build)

    def fail(out: Path) -> None:
        raise AssertionError("built again")

    assert tiny.install(tmp_path, DIGEST, fail) == model and _whole(model)


def test_the_model_appears_only_whole(tmp_path: Path) -> None:
    """While the build runs, the model's name does not exist: a reader sees nothing or the whole model."""
    seen: list[bool] = []

    def build(out: Path) -> None:
        _build(out)
        seen.append((tmp_path / f"tiny-llama-{DIGEST[:12]}").exists())

    tiny.install(tmp_path, DIGEST, build)
    assert seen == [False]


def test_another_builders_model_in_use_is_never_deleted(tmp_path: Path) -> None:
    """Another checkout's model (another digest), a file of it held open as a vLLM holds its weights,
    is left byte for byte as it was."""
    other = tmp_path / "tiny-llama-0123456789ab"
    other.mkdir()
    _build(other)
    (other / tiny.MARKER).write_text("01" * 32 + "\n")
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    with (other / "model.safetensors").open("rb"):
        tiny.install(tmp_path, DIGEST, _build)
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before


def test_a_failed_build_leaves_no_model_and_no_partial(tmp_path: Path) -> None:
    """A build that raises leaves neither the model's name nor its partial directory behind."""

    def broken(out: Path) -> None:
        _build(out)
        raise RuntimeError("out of disk")

    with pytest.raises(RuntimeError, match="out of disk"):
        tiny.install(tmp_path, DIGEST, broken)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_build_is_removed_and_an_unmarked_model_set_aside(tmp_path: Path) -> None:
    """What a killed build left (``*.partial-*``) is removed; a directory of the model's name that is
    not marked whole is renamed aside (``*.stale-*``, kept), and the model built in its place."""
    partial = tmp_path / f"tiny-llama-{DIGEST[:12]}.partial-x1"
    partial.mkdir()
    damaged = tmp_path / f"tiny-llama-{DIGEST[:12]}"
    damaged.mkdir()
    (damaged / "config.json").write_text("half")
    model = tiny.install(tmp_path, DIGEST, _build)
    assert not partial.exists() and _whole(model)
    (stale,) = tmp_path.glob(f"tiny-llama-{DIGEST[:12]}.stale-*")
    assert (stale / "config.json").read_text() == "half"
