"""A resumable stand-in collector for the kill harness: it answers its shard's rows one by one.

Usage (as a benchmark's ``collector.command``): ``python kill_collector.py ROW_S PER_LINK`` (the
overrides in ``GYMSLURM_COLLECT_OVERRIDES``, as gymslurm passes them, or after these two).
Each invocation reads ``+input_jsonl_fpath``, keeps the complete lines of ``+output_jsonl_fpath``
(a line torn by a kill is cut off), answers up to ``PER_LINK`` unanswered rows (``ROW_S`` seconds
each; USR1/TERM/INT end it early), appending each answer as one fsynced line, then writes
``<stem>_coverage.json`` through the store (the stand-in's :func:`standin_coverage`, so the chain
sees its progress) and exits 0 when every row is answered, 75 otherwise. The answer of row
``{"q": i}`` is ``{"q": i, "a": 2 * i}``: the harness checks the merged output holds each once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def _override(argv: list[str], key: str) -> Path:
    return Path(next(a.split("=", 1)[1] for a in argv if a.startswith(f"+{key}=")))


def complete_answers(output: Path) -> set[int]:
    """The rows answered in ``output``; a torn last line is cut off."""
    if not output.exists():
        return set()
    data = output.read_bytes()
    keep = data[: data.rfind(b"\n") + 1]
    if len(keep) != len(data):
        with output.open("r+b") as handle:
            handle.truncate(len(keep))
    return {json.loads(line)["q"] for line in keep.splitlines() if line.strip()}


def main() -> int:
    row_s, per_link = float(sys.argv[1]), int(sys.argv[2])
    # gymslurm passes the overrides in the environment, never on the command line (issue 20)
    argv = [*sys.argv[3:], *json.loads(os.environ.get("GYMSLURM_COLLECT_OVERRIDES", "[]"))]
    stop: list[int] = []
    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, _f: stop.append(s))
    source, output = _override(argv, "input_jsonl_fpath"), _override(argv, "output_jsonl_fpath")
    rows = [json.loads(line)["q"] for line in source.read_text().splitlines() if line.strip()]
    output.parent.mkdir(parents=True, exist_ok=True)
    done = complete_answers(output)
    new = 0
    with output.open("ab") as handle:
        for q in [q for q in rows if q not in done][:per_link]:
            deadline = time.monotonic() + row_s
            while time.monotonic() < deadline and not stop:
                time.sleep(0.02)
            if stop:
                break
            handle.write(json.dumps({"q": q, "a": 2 * q}).encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
            done.add(q)
            new += 1
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from gymslurm.store.paths import RunPaths
    from gymslurm.store.store import write_coverage
    from tests.slurm.launcher_standin_collector import EXPECTED, standin_coverage

    complete = all(q in done for q in rows)
    successful = EXPECTED if complete else min(len(done), EXPECTED - 1)
    write_coverage(RunPaths.for_output(output), standin_coverage(successful, progress=new, complete=complete))
    return 0 if complete else 75


if __name__ == "__main__":
    raise SystemExit(main())
