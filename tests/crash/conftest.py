"""Crash tests: real subprocesses writing through the store, SIGKILLed at random points."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "crash: SIGKILLs subprocesses that write a run; independent, safe to run in parallel"
    )
