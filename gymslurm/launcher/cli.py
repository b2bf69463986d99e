"""The launcher's commands: ``submit``, ``status``, ``logs``, ``resubmit``, ``cancel`` and ``chain-step``.

``gymslurm.cli`` routes each of these names here as ``main(command, argv)``; each parses its own
arguments with argparse (benchmark overrides are Hydra's ``key=value`` and pass through).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode

DEFAULT_RUN_ROOT = "gymslurm_runs"


def _submit(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gymslurm submit", description="Submit a benchmark as job chains.")
    parser.add_argument(
        "benchmark", nargs="?", help="configs/benchmarks/<name>.yaml name, or a path to a YAML file"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. shards=3 slurm.partition=low")
    parser.add_argument(
        "--reverify", metavar="RUN",
        help="re-grade RUN's saved judge-failed answers as jobs (no benchmark: RUN's own, overrides on top)",
    )  # fmt: skip
    parser.add_argument(
        "--run-root", default=DEFAULT_RUN_ROOT,
        help=f"with --reverify: where RUN lives (default {DEFAULT_RUN_ROOT})",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the scripts; write and submit nothing")
    parser.add_argument("--backend", choices=["slurm", "local"], help="default: the benchmark's (auto)")
    parser.add_argument(
        "--wait",
        action="store_true",
        help="stay until every chain and the aggregation ended, then show status",
    )
    args = parser.parse_intermixed_args(argv)
    if args.reverify is not None:
        from gymslurm.launcher.regrade import submit_reverify

        overrides = [*([args.benchmark] if args.benchmark else []), *args.overrides]
        return submit_reverify(
            args.reverify, overrides, args.backend, args.dry_run, wait=args.wait, run_root=args.run_root
        )
    if args.benchmark is None:
        parser.error("a benchmark is needed (or --reverify RUN)")
    from gymslurm.launcher.submit import submit

    return submit(args.benchmark, args.overrides, args.backend, args.dry_run, wait=args.wait)


def _status(argv: list[str]) -> int:
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
    from gymslurm.launcher.backend import run_backend
    from gymslurm.launcher.rundir import find_runs, resolve_run
    from gymslurm.launcher.views.report import refresh_report
    from gymslurm.launcher.views.status import read_chains, run_status
    from gymslurm.launcher.views.table import print_table

    root = Path(args.run_root).resolve()
    if args.run is None:
        return _list_runs(find_runs(root), args.json)
    run = resolve_run(args.run, root)
    backend = run_backend(run)
    gc.disable()  # a document of 10,000 shards is millions of objects and no cycles: no collector passes
    shards = run.read_info().shards
    if args.shard is not None and not 0 <= args.shard < shards:
        raise ConfigError(f"run {run.name} has shards 0..{shards - 1}, not {args.shard}")
    chains = read_chains(run, shards)
    report = run_status(run, backend, chains=chains, shard=args.shard)
    if not args.json and args.shard is None:  # the page is for people: a script polling --json
        refresh_report(run, backend, report, chains)  # does not pay its render
    if args.json:  # orjson: the 10 MB document of 10,000 shards in a few ms, not a quarter second
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print_table(report)
    return ExitCode.DONE


def _list_runs(runs: list[Any], as_json: bool) -> int:
    from gymslurm.launcher.backend import Backend, run_backend
    from gymslurm.launcher.local import LocalBackend
    from gymslurm.launcher.views.status import run_status

    shared: dict[str, Any] = {}
    listed = []
    for run in runs:
        info = run.read_info()
        backend: Backend = LocalBackend(run.local_dir) if info.backend == "local" else _SharedSlurm(shared)
        if info.backend == "slurm" and (info.placement is not None or info.cluster is not None):
            backend = run_backend(run)  # its own clusters' queues (the shared one is the default cluster's)
        report = run_status(run, backend)
        verdicts = Counter(row["verdict"] for row in report["shards"])
        listed.append(
            {"run": run.name, "benchmark": info.benchmark, "backend": info.backend,
             "created_at": info.created_at, "shards": dict(verdicts), "path": str(run.root)}
        )  # fmt: skip
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
    """A Slurm backend whose one squeue answer is shared by every run listed."""

    name = "slurm"

    def __init__(self, cache: dict[str, Any]) -> None:
        from gymslurm.launcher.backend import SlurmBackend

        self.cache, self.inner = cache, cache.setdefault("backend", SlurmBackend())

    @property
    def queries(self) -> int:
        return int(self.inner.queries)

    def queue(self) -> Any:
        if "queue" not in self.cache:
            self.cache["queue"] = self.inner.queue()
        return self.cache["queue"]

    def accounting(self, job_ids: Any, every_run: bool = False) -> Any:
        return {}  # the list shows verdicts only; per-run status asks sacct

    def ended(self, job_id: str) -> Any:
        return None  # the list never accounts for a job

    def submit(self, script: Any, after: Any = ()) -> str:
        raise NotImplementedError("listing runs never submits")

    def cancel(self, job_ids: Any) -> None:
        raise NotImplementedError("listing runs never cancels")


def _logs(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gymslurm logs", description="Print a link's job log and its Environment Servers' logs."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--shard", type=int, default=0, help="the shard (default 0)")
    which.add_argument("--aggregate", action="store_true", help="the aggregation job's log")
    parser.add_argument(
        "--link", type=int, default=-1, help="1 = the chain's first job, -1 = newest (default)"
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the link decided")
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.rundir import resolve_run_or_job
    from gymslurm.launcher.views.logs import show

    run = resolve_run_or_job(args.run, Path(args.run_root).resolve())
    return show(run, None if args.aggregate else args.shard, args.link, args.follow)


def _report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gymslurm report", description="Write the run's self-contained report.html (no server needed)."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("--output", type=Path, help="where to write it (default: <run>/report.html)")
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.backend import run_backend
    from gymslurm.launcher.rundir import resolve_run_or_job
    from gymslurm.launcher.views.report import write_report

    run = resolve_run_or_job(args.run, Path(args.run_root).resolve())
    path = write_report(run, run_backend(run), args.output)
    print(f"wrote {path} (open it in a browser; it needs no server and no network)")
    return 0


def _resubmit(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gymslurm resubmit", description="Fresh budgets and new chains for a run's unfinished shards."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("benchmark", help="the benchmark the run was submitted with")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (must not change the experiment)")
    parser.add_argument(
        "--run-root", default=None, help="where runs live (default: the benchmark's run_root)"
    )
    parser.add_argument(
        "--shards", default=None, metavar="SEL",
        help="restart only these shards: failed, stalled, exhausted, cancelled (by status), or 0,3,7-9",
    )  # fmt: skip
    parser.add_argument(
        "--gpu-hours", type=_gpu_hours_raise, default=0.0, metavar="+H",
        help="raise the run's budget.gpu_hours by H GPU-hours (docs/cost.md)",
    )  # fmt: skip
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.submit import resubmit

    return resubmit(
        args.run, args.benchmark, args.overrides, args.run_root, args.shards, gpu_hours_added=args.gpu_hours
    )


def _gpu_hours_raise(text: str) -> float:
    """``+H`` (or ``H``): a positive number of GPU-hours to add to the budget."""
    try:
        value = float(text.removeprefix("+"))
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a raise of the budget: give +H, H > 0 GPU-hours")
    return value


def _pause(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gymslurm pause", description="Give a run's allocation back now; 'gymslurm resume' goes on."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.pause import pause

    return pause(args.run, args.run_root)


def _resume(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gymslurm resume", description="Go on with a paused run's shards, with the budgets they had."
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("benchmark", help="the benchmark the run was submitted with")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (must not change the experiment)")
    parser.add_argument(
        "--run-root", default=None, help="where runs live (default: the benchmark's run_root)"
    )
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.pause import resume

    return resume(args.run, args.benchmark, args.overrides, args.run_root)


def _cancel(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gymslurm cancel", description="Cancel every job of a run.")
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.cancel import cancel

    return cancel(args.run, args.run_root)


def _doctor(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gymslurm doctor",
        description="Check the Slurm settings job chains rely on: what each breaks, and the fix.",
    )
    parser.add_argument("--partition", help="check this partition only (and that it exists)")
    parser.add_argument("--shards", type=int, help="check queue limits against this many shards")
    parser.add_argument(
        "--lookahead", type=int, default=2, help="slurm.lookahead of the run (jobs queued behind each job)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--probe", metavar="RUN_ROOT", default=None,
        help="also run a tiny job: Python and gymslurm on the compute node, flock on RUN_ROOT, clock",
    )  # fmt: skip
    parser.add_argument("--python", default="python", help="the Python the probe job runs (slurm.python)")
    parser.add_argument("--cluster", help="check this Slurm cluster (as -M; slurm.cluster), not the default")
    parser.add_argument(
        "--benchmark", metavar="BENCH",
        help="check every cluster this benchmark names (slurm.clusters, else slurm.cluster) with its "
        "partition and each cluster's share of its shards",
    )  # fmt: skip
    parser.add_argument("overrides", nargs="*", help="with --benchmark: Hydra overrides")
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.doctor import run_doctor, run_plan_doctor

    if args.benchmark is not None:
        from gymslurm.launcher.settings import load_benchmark

        if args.cluster or args.partition or args.shards is not None:
            raise ConfigError("--benchmark takes its clusters, partition and shards from the benchmark: "
                              "give overrides (slurm.partition=P) instead of --cluster/--partition/--shards")
        settings, _ = load_benchmark(args.benchmark, args.overrides)
        python = args.python if args.python != "python" else None
        return run_plan_doctor(settings, args.json, args.probe, python)
    if args.overrides:
        raise ConfigError(f"overrides {args.overrides} need --benchmark")
    return run_doctor(
        args.partition, args.shards, args.json, args.probe, args.python, cluster=args.cluster,
        lookahead=args.lookahead,
    )


def _inject(argv: list[str]) -> int:
    from gymslurm.launcher.ledger import FAULTS

    parser = argparse.ArgumentParser(
        prog="gymslurm inject",
        description="Send one fault to a shard's live link (recorded in its ledger); docs/inject.md.",
    )
    parser.add_argument("run", help="run name or path, or the id of one of its jobs")
    parser.add_argument("shard", type=int)
    parser.add_argument("--kind", required=True, choices=FAULTS)
    parser.add_argument("--run-root", default=DEFAULT_RUN_ROOT)
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.backend import run_backend
    from gymslurm.launcher.inject import inject
    from gymslurm.launcher.rundir import resolve_run_or_job

    run = resolve_run_or_job(args.run, Path(args.run_root).resolve())
    print(inject(run, args.shard, args.kind, run_backend(run, args.shard)))
    return 0


def _chain_step(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gymslurm chain-step", description="(internal) one link, inside a job"
    )
    parser.add_argument("--run-dir", required=True, type=Path)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--shard", type=int)
    which.add_argument("--aggregate", action="store_true")
    args = parser.parse_intermixed_args(argv)
    from gymslurm.launcher.backend import run_backend, this_job
    from gymslurm.launcher.job.aggregation import run_aggregation
    from gymslurm.launcher.job.link import run_link
    from gymslurm.launcher.rundir import RunDir

    run = RunDir(args.run_dir.resolve())
    settings = run.load_settings()
    # The cluster this job runs on (a run across clusters: run.json's placement of the shard).
    backend = run_backend(run, args.shard, aggregation=args.aggregate)
    if args.aggregate:
        return run_aggregation(run, settings, backend, this_job(backend))
    return run_link(run, args.shard, settings, backend, this_job(backend))


COMMANDS = {
    "submit": _submit,
    "status": _status,
    "logs": _logs,
    "report": _report,
    "resubmit": _resubmit,
    "cancel": _cancel,
    "pause": _pause,
    "resume": _resume,
    "doctor": _doctor,
    "inject": _inject,
    "chain-step": _chain_step,
}


def main(command: str, argv: list[str]) -> int:
    """Run one launcher command with its arguments; returns the exit code."""
    return COMMANDS[command](argv)
