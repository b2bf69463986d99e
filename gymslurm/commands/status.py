"""``gymslurm status [RUN]``: each chain of a run (``--json`` the typed document), or every run in a list."""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gymslurm.commands.runs import DEFAULT_RUN_ROOT
from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode


def main(argv: list[str]) -> int:
    """``gymslurm status``: parse its arguments and run it."""
    parser = argparse.ArgumentParser(prog="gymslurm status", description="Show each chain of a run.")
    parser.add_argument("run", nargs="?", help="run name or path; omitted: list the runs")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--shard", type=int, metavar="N", help="this shard alone, with each link's GPU-hours (docs/cost.md)"
    )
    parser.add_argument(
        "--run-root", default=DEFAULT_RUN_ROOT, help=f"where runs live (default {DEFAULT_RUN_ROOT})"
    )
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.run_site import run_backend
    from gymslurm.launcher.rundir import find_runs, is_suite, queuing_left, resolve_run
    from gymslurm.launcher.views.status import read_chains, run_status

    root = Path(args.run_root).resolve()
    if args.run is None:
        return _list_runs(find_runs(root), args.json)
    from gymslurm.store.watch_ledger import find_watch

    if (watch := find_watch(args.run, root)) is not None:  # a watch (docs/watch.md)
        from gymslurm.commands.watch import watch_status

        return watch_status(watch)
    run = resolve_run(args.run, root)
    if queuing_left(run):  # a submit killed midway: its first links queued, never twice
        from gymslurm.job.first_links import finish_queuing  # (and its imports only then)

        finish_queuing(run, "status")
    backend = run_backend(run)
    gc.disable()  # a document of 10,000 shards is millions of objects and no cycles: no collector passes
    shards = run.read_info().shards
    if args.shard is not None and not 0 <= args.shard < shards:
        raise ConfigError(f"run {run.name} has shards 0..{shards - 1}, not {args.shard}")
    chains = read_chains(run, shards)
    report = run_status(run, backend, chains=chains, shard=args.shard)
    if not args.json and args.shard is None:  # the page is for people: a script polling --json
        from gymslurm.launcher.views.report import refresh_report  # does not pay its render (nor imports)

        refresh_report(run, backend, report, chains)
    suite: list[Any] = []
    if is_suite(run):  # one line per benchmark (docs/suites.md); a run of one benchmark imports none of it
        from gymslurm.launcher.views.suite_status import suite_rows

        suite = suite_rows(run, report.summary.gpu_hours)
    if args.json:  # orjson: the 10 MB document of 10,000 shards in a few ms, not a quarter second
        from gymslurm.launcher.views.document import status_json, with_suite

        sys.stdout.buffer.write(status_json(with_suite(report, suite)))
    else:
        from gymslurm.launcher.views.table import print_table

        print_table(report)
        if suite:
            from gymslurm.launcher.views.suite_status import suite_lines

            for line in suite_lines(suite):
                print(line)
    return ExitCode.DONE


def _list_runs(runs: list[Any], as_json: bool) -> int:
    from gymslurm.launcher.run_site import run_backend
    from gymslurm.launcher.views.status import run_status
    from gymslurm.site.backend import Backend
    from gymslurm.site.local import LocalBackend

    shared: dict[str, Any] = {}
    listed = []
    for run in runs:
        info = run.read_info()
        backend: Backend = LocalBackend(run.local_dir) if info.backend == "local" else _SharedSlurm(shared)
        if info.backend == "slurm" and (info.placement is not None or info.cluster is not None):
            backend = run_backend(run)  # its own clusters' queues (the shared one is the default cluster's)
        report = run_status(run, backend)
        verdicts = Counter(str(row.verdict) for row in report.shards)
        listed.append(
            {
                "run": run.name,
                "benchmark": info.benchmark,
                "backend": info.backend,
                "created_at": info.created_at,
                "shards": dict(verdicts),
                "path": str(run.root),
            }
        )
    if as_json:
        print(json.dumps(listed, indent=2))
        return 0
    print(list_header())
    if not listed:
        print("(no runs yet; start one with: gymslurm submit demo)")
    for item in listed:
        summary = ", ".join(f"{n} {v}" for v, n in sorted(item["shards"].items()))
        print(f"{item['run']:<40} {item['backend']:<7} {item['created_at'][:19]:<19}  {summary}")
    return ExitCode.DONE


def list_header() -> str:
    """The header of ``gymslurm status`` with no run: always printed, even with no run."""
    return f"{'run':<40} {'backend':<7} {'created (UTC)':<19}  shards by verdict"


class _SharedSlurm:
    """A Slurm backend whose one squeue answer (the user's whole queue) is shared by every run listed:
    its lines grouped by job name once, each run types only its own (site/job_names.py)."""

    name = "slurm"

    def __init__(self, cache: dict[str, Any]) -> None:
        from gymslurm.site.backend import SlurmBackend

        self.cache, self.inner = cache, cache.setdefault("backend", SlurmBackend())

    @property
    def queries(self) -> int:
        return int(self.inner.queries)

    def queue(self, jobs: Any = None) -> Any:
        from gymslurm.site.job_names import lines_by_name, run_lines
        from gymslurm.site.slurm import parse_squeue

        if "lines" not in self.cache:
            self.cache["lines"] = lines_by_name(self.inner.client.queue_text())
        groups = self.cache["lines"]
        lines = (
            run_lines(groups, jobs)
            if jobs is not None
            else (line for group in groups.values() for line in group)
        )
        return {row.job_id: row for row in parse_squeue(lines)}

    def job_rows(self, job_ids: Any) -> Any:
        return {job: row for job, row in self.queue().items() if job in set(job_ids)}

    def accounting(self, job_ids: Any, every_run: bool = False) -> Any:
        return {}  # the list shows verdicts only; per-run status asks sacct

    def ended(self, job_id: str) -> Any:
        return None  # the list never accounts for a job

    def submit(self, script: Any, after: Any = ()) -> str:
        raise NotImplementedError("listing runs never submits")

    def cancel(self, job_ids: Any) -> None:
        raise NotImplementedError("listing runs never cancels")
