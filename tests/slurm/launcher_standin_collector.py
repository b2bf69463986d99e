"""A scripted stand-in for ``gymslurm collect``, for testing the launcher's chains.

Usage (as the benchmark's ``collector.command``)::

    python tests/slurm/launcher_standin_collector.py STEPS.json   (overrides in GYMSLURM_COLLECT_OVERRIDES)

``STEPS.json`` is a list of steps, one per invocation on the same output (the last one repeats):
``{"exit": 75, "progress": 2, "sleep": 0, "on_signal": 75}``. Each invocation sleeps ``sleep``
seconds (USR1/TERM/INT end the sleep and exit with ``on_signal``); with ``"hold": {"output": S,
"until": PATH}`` an invocation whose output path contains ``S`` first waits until ``PATH`` (relative:
beside STEPS.json) exists, so a test decides when a link ends; then it writes
``<stem>_coverage.json`` through the store's own writer, as a full :class:`~gymslurm.coverage.Coverage`
(so the stand-in and the chain read and write one format: ``successful`` grows by ``progress``,
``progress_outcomes_recorded`` = ``progress``, a fresh ``written_at``) and exits with ``exit``.
Every invocation's argv (and the *names* of credential-like environment variables it saw, and
whether the Environment Server at ``+environment_server_url`` answered ``GET /health``) is appended
to ``<stem>_standin_calls.jsonl``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gymslurm.coverage import Coverage

# gymslurm is imported only once the signal handlers are in place (see main): a link signalled a
# moment after it started (a short --time under load) must find the stand-in already listening.
EXPECTED = 100


def standin_coverage(
    successful: int, *, progress: int, complete: bool, failed: int = 0, omitted: int = 0
) -> Coverage:
    """A coverage of ``EXPECTED`` rollouts with these counts, every other field consistent with them."""
    from gymslurm.clock import utc_now
    from gymslurm.coverage import Coverage

    return Coverage(
        run_id="run-standin",
        expected=EXPECTED,
        successful=successful,
        measured=successful,
        masked=0,
        unscored=0,
        failed=failed,
        intentionally_omitted=omitted,
        not_started=max(EXPECTED - successful - failed - omitted, 0),
        missing=0,
        complete=complete,
        reconciled=True,
        scored=successful,
        attempts=successful + failed,
        counted_failures=failed,
        failure_budget_exhausted=0,
        max_rollout_attempts=3,
        retry_terminal_timeouts=False,
        retryable=1,
        progress_outcomes_recorded=progress,
        failed_by_class={},
        historical_failed_attempts=failed,
        identity_verified=True,
        written_at=utc_now(),
    )


def _override(argv: list[str], key: str) -> str:
    for arg in argv:
        if arg.startswith(f"+{key}="):
            return arg.split("=", 1)[1]
    raise SystemExit(f"stand-in collector: missing +{key}= in {argv}")


def _health(argv: list[str]) -> str | None:
    """GET /health of the Environment Server named by +environment_server_url, if any."""
    url = next((a.split("=", 1)[1] for a in argv if a.startswith("+environment_server_url=")), None)
    if url is None:
        return None
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
            return f"{reply.status} {url}"
    except OSError as error:
        return f"unreachable {url}: {error}"


def main() -> int:
    steps = json.loads(Path(sys.argv[1]).read_text())
    # gymslurm passes the overrides in the environment, never on the command line (issue 20)
    overrides = [*sys.argv[2:], *json.loads(os.environ.get("GYMSLURM_COLLECT_OVERRIDES", "[]"))]
    output = Path(_override(overrides, "output_jsonl_fpath"))
    output.parent.mkdir(parents=True, exist_ok=True)
    calls = output.with_name(f"{output.stem}_standin_calls.jsonl")
    count = len(calls.read_text().splitlines()) if calls.exists() else 0
    step = steps[min(count, len(steps) - 1)]
    with calls.open("a") as handle:
        secret_keys = sorted(k for k in os.environ if k.endswith(("_API_KEY", "_TOKEN")))  # names only
        server = _health(overrides)
        record = {"argv": overrides, "at": time.time(), "secret_env_keys": secret_keys, "server": server}
        handle.write(json.dumps(record) + "\n")
    interrupted: list[int] = []

    def _stop(signum: int, _frame: object) -> None:
        interrupted.append(signum)

    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    # Now that a signal is caught, load the store (pydantic takes a moment under load): by the time
    # a signal ends the sleep, writing the coverage is instant, well before Slurm's kill.
    from gymslurm.store.files import read_coverage, write_coverage
    from gymslurm.store.paths import RunPaths

    hold = step.get("hold")
    if hold and hold["output"] in str(output):
        release = Path(sys.argv[1]).parent / hold["until"]  # an absolute "until" stays as it is
        while not release.exists() and not interrupted:
            time.sleep(0.2)
    deadline = time.monotonic() + float(step.get("sleep", 0))
    while time.monotonic() < deadline and not interrupted:
        time.sleep(0.05)
    paths = RunPaths.for_output(output)
    old = read_coverage(paths)
    progress = int(step.get("progress", 1 if step.get("exit") == 75 else 0))
    successful = (old.successful if old else 0) + progress
    write_coverage(paths, standin_coverage(successful, progress=progress, complete=step.get("exit") == 0))
    if interrupted:
        return int(step.get("on_signal", 75))
    return int(step["exit"])


if __name__ == "__main__":
    raise SystemExit(main())
