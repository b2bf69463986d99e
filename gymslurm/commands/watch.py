"""``gymslurm watch DIR|GLOB --suite S``: evaluate every new checkpoint on a suite, from a job.

Nothing stays on the login node: this command validates everything, writes the watch's folder
(``<run_root>/watches/<name>/``: ``watch.json``, ``scripts/tick.sbatch``, the ledger) and queues
its first tick, a small job of the backend that queues the next one itself (commands/watch_tick.py).
``gymslurm status WATCH`` and ``gymslurm cancel WATCH`` read and stop it (:func:`watch_status`,
:func:`cancel_watch`). Docs: docs/watch.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import yaml

from gymslurm.commands.runs import DEFAULT_RUN_ROOT
from gymslurm.errors import ConfigError
from gymslurm.exitcodes import ExitCode
from gymslurm.formats import version_of
from gymslurm.site.backend import LIVE_STATES, backend_name
from gymslurm.site.scriptsafe import control_problem
from gymslurm.store.atomic import publish_bytes
from gymslurm.store.watch_ledger import WatchFolder, WatchSettings, record, watch_root
from gymslurm.watch_rules import fold, parse_interval, recent_ticks, uses_checkpoint, with_checkpoint


def main(argv: list[str]) -> int:
    """``gymslurm watch``: parse, validate, create the watch and queue its first tick."""
    parser = argparse.ArgumentParser(
        prog="gymslurm watch",
        description="Evaluate each new checkpoint of DIR (or GLOB) on a suite, from a job that queues "
        "itself again every interval. Docs: docs/watch.md",
    )
    parser.add_argument(
        "source", metavar="DIR|GLOB", help="a folder whose children are checkpoints, or a glob"
    )
    parser.add_argument("--suite", required=True, help="the suite (configs/suites/<name>.yaml or a path)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of every benchmark of the suite")
    parser.add_argument("--every", default="5m", help="the interval between ticks (30s, 5m, 1h; default 5m)")
    parser.add_argument("--name", help="the watch's name (default: the suite's and the folder's)")
    parser.add_argument(
        "--ready",
        choices=["marker", "pattern", "settle"],
        default="settle",
        help="a checkpoint is complete when: marker (a file --marker is in it), pattern "
        "(its name matches --pattern), settle (unchanged for --settle; default)",
    )
    parser.add_argument("--pattern", default="*", help="checkpoint names to consider (glob; default *)")
    parser.add_argument("--marker", default="READY", help="the marker file's name (--ready marker)")
    parser.add_argument("--settle", default="2m", help="--ready settle: how long unchanged (default 2m)")
    parser.add_argument(
        "--convert", help="a conversion command run as its own job first: {checkpoint}, {output}"
    )
    parser.add_argument(
        "--gate", type=Path, metavar="POLICY", help="a gate policy applied to each comparison"
    )
    parser.add_argument("--backend", choices=["slurm", "local"], help="default: Slurm when sbatch is on PATH")
    parser.add_argument(
        "--run-root", default=DEFAULT_RUN_ROOT, help=f"where watches live (default {DEFAULT_RUN_ROOT})"
    )
    parser.add_argument(
        "--slurm-directive",
        action="append",
        default=[],
        metavar="LINE",
        help="an extra #SBATCH line of the watch's own jobs (repeatable: --partition=cpu)",
    )
    args = parser.parse_intermixed_args(argv)
    settings = watch_settings(args)
    folder = WatchFolder(watch_root(Path(settings.run_root)) / settings.name)
    folder.create(settings)
    publish_bytes(folder.scripts / "tick.sbatch", tick_script(folder, settings).encode(), mode=0o700)
    from gymslurm.commands.watch_jobs import backend_of

    backend = backend_of(folder, settings)
    job = backend.submit(folder.scripts / "tick.sbatch")
    with folder.lock():
        folder.append(record("scheduled", job=job))
    print(
        f"watch {settings.name} started ({settings.backend}): first tick job {job}, then every "
        f"{settings.every_s}s. See it with: gymslurm status {settings.name}; stop it with: "
        f"gymslurm cancel {settings.name}"
    )
    return ExitCode.DONE


def watch_settings(args: argparse.Namespace) -> WatchSettings:
    """Every option checked, and the suite loaded once with a stand-in checkpoint: nothing written."""
    from gymslurm.launcher.suite_settings import load_suite, suite_path

    suite_file = suite_path(args.suite)
    if suite_file is None or not suite_file.is_file():
        raise ConfigError(f"--suite {args.suite}: no such suite (configs/suites/<name>.yaml or a path)")
    data = yaml.safe_load(suite_file.read_text())
    if not uses_checkpoint(data.get("stack")):
        raise ConfigError(
            f"suite {suite_file}: no {{checkpoint}} in its stack: a watch passes each checkpoint to the "
            'model server through it; add it to the server\'s command (e.g. --checkpoint, "{checkpoint}")'
        )
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:  # the suite as a checkpoint will make it, now
        stand_in = Path(scratch) / suite_file.name
        stand_in.write_text(yaml.safe_dump(with_checkpoint(data, "/checkpoint")))
        load_suite(str(stand_in), args.overrides)
    for line in args.slurm_directive:
        if problem := control_problem("--slurm-directive", line):
            raise ConfigError(problem)
    gate = None
    if args.gate is not None:
        from gymslurm.gate import parse_policy

        if not args.gate.is_file():
            raise ConfigError(f"--gate {args.gate}: no such policy file")
        parse_policy(args.gate.read_text(), str(args.gate))
        gate = str(args.gate.resolve())
    source = args.source if any(c in args.source for c in "*?[") else str(Path(args.source).resolve())
    name = args.name or f"{suite_file.stem}-{Path(args.source.split('*')[0]).name or 'glob'}"
    if not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise ConfigError(f"--name {name!r}: letters, digits, '-', '_' or '.' only")
    return WatchSettings(
        format_version=version_of("watch"),
        name=name,
        source=source,
        suite=str(suite_file.resolve()),
        overrides=args.overrides,
        every_s=parse_interval(args.every),
        mode=args.ready,
        pattern=args.pattern,
        marker=args.marker,
        settle_s=float(parse_interval(args.settle)) if args.ready == "settle" else 0.0,
        backend=backend_name(args.backend or "auto"),
        workdir=str(Path.cwd()),
        run_root=str(Path(args.run_root).resolve()),
        interpreter=sys.executable,
        convert=shlex.split(args.convert) if args.convert else None,
        gate_policy=gate,
        slurm_directives=args.slurm_directive,
    )


def tick_script(folder: WatchFolder, settings: WatchSettings) -> str:
    """The tick job's script (pure): one small CPU job, no GPU, that runs one tick and ends."""
    directives = "\n".join(
        line if line.startswith("#SBATCH") else f"#SBATCH {line}" for line in settings.slurm_directives
    )
    command = " ".join(
        shlex.quote(part) for part in (settings.interpreter, "-m", "gymslurm", "watch-tick", str(folder.root))
    )
    return (
        "#!/bin/bash\n"
        f"# gymslurm: one tick of watch {settings.name}: it looks for new checkpoints of\n"
        f"#   {settings.source}\n"
        "# submits a suite run per new one, compares the ended ones, queues the next tick, and ends.\n"
        "# Submit it again by hand (safe at any time, twice too) with:\n"
        f"#   sbatch {folder.scripts / 'tick.sbatch'}\n"
        f"#SBATCH --job-name=gsw-{settings.name}\n"
        f"#SBATCH --output={folder.logs}/tick-%j.out\n"
        "#SBATCH --open-mode=append\n"
        "#SBATCH --time=00:15:00\n"
        "#SBATCH --ntasks=1\n"
        "#SBATCH --cpus-per-task=1\n"
        f"{directives}\n"
        "set -u\n"
        f"cd {shlex.quote(settings.workdir)}\n"
        f"exec {command}\n"
    )


def watch_status(folder: WatchFolder) -> int:
    """``gymslurm status WATCH``: its checkpoints, each one's run and comparison, and its tick jobs."""
    from gymslurm.commands.watch_jobs import backend_of, run_ended

    settings = folder.read_settings()
    state = fold(folder.read())
    backend = backend_of(folder, settings)
    rows = backend.job_rows(recent_ticks(state.ticks)) if state.ticks else {}
    live = [job for job, row in rows.items() if row.state in LIVE_STATES]
    word = "cancelled" if state.cancelled else ("watching" if live else "stopped (no tick job queued)")
    print(f"watch {folder.name}: {word}; {settings.source} every {settings.every_s}s, suite {settings.suite}")
    print(f"tick jobs queued: {' '.join(live) or 'none'}")
    for checkpoint in state.ordered():
        if checkpoint.compared is not None:
            what = checkpoint.compared.get("summary", "compared")
        elif checkpoint.convert_failed:
            then = "its suite run was cancelled" if checkpoint.run else "no suite run"
            what = f"FAILED: {checkpoint.convert_failed}; not retried, {then}"
        elif checkpoint.convert_job and checkpoint.converted is None:
            waits = "its suite run waits for it (afterok)" if checkpoint.run else "its suite run follows"
            what = f"converting: job {checkpoint.convert_job}; {waits}"
        elif checkpoint.run is not None:
            what = "ended, to compare" if run_ended(Path(checkpoint.run)) else "running"
        else:
            what = "claimed, to submit"
        print(f"  {checkpoint.checkpoint}\n    run: {checkpoint.run or '-'}\n    {what}")
    print(f"{len(state.checkpoints)} checkpoint(s)")
    return ExitCode.DONE


def cancel_watch(folder: WatchFolder) -> int:
    """``gymslurm cancel WATCH``: record it (a tick that runs later ends at once), cancel queued ticks."""
    from gymslurm.commands.watch_jobs import backend_of

    settings = folder.read_settings()
    backend = backend_of(folder, settings)
    with folder.lock():
        state = fold(folder.read())
        if not state.cancelled:
            folder.append(record("cancelled"))
    rows = backend.job_rows(recent_ticks(state.ticks)) if state.ticks else {}
    live = [job for job, row in rows.items() if row.state in LIVE_STATES]
    backend.cancel(live)
    runs = [c.run for c in state.ordered() if c.run and c.compared is None]
    print(f"watch {folder.name} cancelled; tick job(s) cancelled: {' '.join(live) or 'none'}")
    for run in runs:
        print(f"  a suite run still goes on: {run} (gymslurm cancel {run} to stop it too)")
    return ExitCode.DONE
