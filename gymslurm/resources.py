"""Where the shipped configs and sbatch templates live, installed or in a source checkout.

A wheel carries them under ``gymslurm/_data`` (see ``pyproject.toml``); an editable install or a
plain checkout reads the top-level ``configs/`` and ``sbatch_templates/`` folders directly, so an
edit there takes effect without reinstalling.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"gymslurm's {name}/ folder is missing from this installation: reinstall gymslurm"
    )


def configs_dir() -> Path:
    """The folder of Hydra configs (``collect.yaml``, ``benchmarks/``)."""
    return _data_dir("configs")


def templates_dir() -> Path:
    """The folder of readable sbatch templates."""
    return _data_dir("sbatch_templates")
