"""One tick of a watch, run as a small job of the backend (``gymslurm watch-tick WATCH``).

A tick, holding the watch's lock from its first read to its last append (store/watch_ledger.py):

1. reads the ledger; a cancelled watch ends here (and queues nothing);
2. records itself (``tick``) and keeps two ticks queued behind it (``--begin=now+EVERY``, the spare
   ``afterany`` the next and one interval later; watch_rules.ticks_to_queue): any single tick job
   killed or cancelled, running or queued, leaves one that runs; a watch submitted twice by hand
   converges to one chain; queued first, so a tick killed midway still has successors;
3. lists the candidates, claims every ready checkpoint not claimed yet (``claimed``, in name order);
4. moves each checkpoint one step (watch_rules.next_step): conversion job, suite run, comparison.

A checkpoint claimed but not ``submitted`` (a tick killed between the two) is first looked up among
the runs: its suite run is named after the watch and the digest, so a run made before the kill is
recorded, never submitted a second time (and ``submit`` refuses a second live run of one suite).
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from gymslurm.commands.watch_jobs import WatchBackend, backend_of, run_ended
from gymslurm.errors import GymslurmError
from gymslurm.site.backend import LIVE_STATES, this_job
from gymslurm.store.watch_ledger import WatchFolder, WatchSettings, record
from gymslurm.watch_rules import (
    Candidate,
    CheckpointState,
    FileEntry,
    FinderSettings,
    WatchState,
    digest,
    earlier_compared,
    fold,
    new_checkpoints,
    next_step,
    ready,
    recent_ticks,
    ticks_to_queue,
    with_checkpoint,
)

TICK_SCRIPT = "tick.sbatch"
CONVERTED_MARK = ".gymslurm-converted"


def log(message: str) -> None:
    """One line of the tick's job log."""
    print(f"gymslurm watch-tick: {message}", flush=True)


def tick(folder: WatchFolder) -> int:
    """Run one tick of the watch in ``folder`` (see the module docstring)."""
    settings = folder.read_settings()
    backend = backend_of(folder, settings)
    me, _ = this_job(backend)
    with folder.lock():
        state = fold(folder.read())
        if state.cancelled:
            log(f"watch {folder.name} was cancelled: nothing done, no next tick")
            return 0
        folder.append(record("tick", job=me))
        schedule_next(folder, settings, backend, state, me)
        claim_ready(folder, settings, state)
        for checkpoint in fold(folder.read()).ordered():
            try:
                advance(folder, settings, backend, checkpoint)
            except GymslurmError as error:  # one checkpoint's trouble never stops the others
                log(f"checkpoint {checkpoint.checkpoint}: {error}")
    return 0


def schedule_next(
    folder: WatchFolder, settings: WatchSettings, backend: WatchBackend, state: WatchState, me: str
) -> None:
    """Keep ``watch_rules.TICK_LOOKAHEAD`` ticks queued behind this one (watch_rules.ticks_to_queue)."""
    asked = recent_ticks(state.ticks)
    rows = backend.job_rows(asked) if asked else {}
    pending = [job for job, row in rows.items() if row.state == "PENDING"]
    plan = ticks_to_queue(state.ticks, pending, me, settings.every_s)
    if not plan.begins_s:
        log(f"the next ticks are queued already ({', '.join(j for j in pending if j != me)})")
        return
    after = plan.after
    for begin_s in plan.begins_s:
        job = backend.submit(folder.scripts / TICK_SCRIPT, after=[after] if after else [], begin_s=begin_s)
        folder.append(record("scheduled", job=job))
        log(f"tick job {job} queued: in {begin_s}s{f', after {after} ends' if after else ''}")
        after = job


def candidates(source: str) -> list[Candidate]:
    """The folder's children (or the glob's matches), each with its files' sizes and times."""
    import glob

    root = Path(source)
    paths = sorted(root.iterdir()) if root.is_dir() else sorted(Path(p) for p in glob.glob(source))
    found = []
    for path in paths:
        resolved = path.resolve()
        files: list[FileEntry] = []
        if resolved.is_file():
            stat = resolved.stat()
            files.append(FileEntry(resolved.name, stat.st_size, stat.st_mtime))
        elif resolved.is_dir():
            for parent, _, names in os.walk(resolved):
                for name in names:
                    full = Path(parent, name)
                    try:
                        stat = full.stat()
                    except FileNotFoundError:  # removed while listed: the next tick sees the folder again
                        continue
                    files.append(FileEntry(str(full.relative_to(resolved)), stat.st_size, stat.st_mtime))
        found.append(Candidate(str(resolved), path.name, tuple(sorted(files, key=lambda f: f.relpath))))
    return found


def claim_ready(folder: WatchFolder, settings: WatchSettings, state: WatchState) -> None:
    """Claim every ready checkpoint the ledger does not know yet."""
    finder = FinderSettings(settings.mode, settings.pattern, settings.marker, settings.settle_s)
    now = time.time()
    paths = [c.path for c in candidates(settings.source) if ready(c, finder, now)]
    fresh = new_checkpoints(state, paths)
    if fresh:
        folder.append(*(record("claimed", digest=digest(p), checkpoint=p) for p in fresh))
        log(f"new checkpoint(s): {', '.join(fresh)}")


def advance(
    folder: WatchFolder, settings: WatchSettings, backend: WatchBackend, checkpoint: CheckpointState
) -> None:
    """Move one checkpoint one step (conversion, suite run, comparison)."""
    run = _run_path(checkpoint.run) if checkpoint.run else None
    step = next_step(checkpoint, settings.convert is not None, run is not None and run_ended(run))
    if step == "convert":
        job = _convert(folder, settings, backend, checkpoint)
        if settings.backend == "slurm":  # the suite run waits for it in Slurm's queue (afterok)
            _submit(folder, settings, checkpoint, after_ok=[job])
    elif step == "check_convert":
        _check_conversion(folder, settings, backend, checkpoint)
    elif step == "submit":
        _submit(folder, settings, checkpoint)
    elif step == "compare":
        from gymslurm.commands.watch_compare import compare_checkpoint

        state = fold(folder.read())
        if not earlier_compared(state, checkpoint):
            log(
                f"checkpoint {checkpoint.checkpoint}: its run ended; compared after the checkpoints before it"
            )
            return
        result = compare_checkpoint(settings, checkpoint, state)
        folder.append(record("compared", digest=checkpoint.digest, run=checkpoint.run, result=result))
        log(f"checkpoint {checkpoint.checkpoint}: compared ({result.get('summary', '')})")


def _run_path(run: str | None) -> Path | None:
    return Path(run) if run else None


def converted_path(folder: WatchFolder, checkpoint: CheckpointState) -> Path:
    """Where the conversion of ``checkpoint`` writes its output."""
    return folder.root / "converted" / checkpoint.digest


def _convert(
    folder: WatchFolder, settings: WatchSettings, backend: WatchBackend, checkpoint: CheckpointState
) -> str:
    assert settings.convert is not None
    output = converted_path(folder, checkpoint)
    output.parent.mkdir(mode=0o700, exist_ok=True)
    argv = [
        part.replace("{checkpoint}", checkpoint.checkpoint).replace("{output}", str(output))
        for part in settings.convert
    ]
    script = folder.scripts / f"convert-{checkpoint.digest}.sbatch"
    from gymslurm.store.atomic import publish_bytes

    publish_bytes(script, convert_script(folder, settings, argv, output).encode(), mode=0o700)
    job = backend.submit(script)
    folder.append(record("converting", digest=checkpoint.digest, job=job))
    log(f"checkpoint {checkpoint.checkpoint}: conversion job {job}")
    return job


def convert_script(folder: WatchFolder, settings: WatchSettings, argv: list[str], output: Path) -> str:
    """The conversion job: the user's command, then a mark that it completed (pure)."""
    command = " ".join(shlex.quote(part) for part in argv)
    directives = "\n".join(f"#SBATCH {d}" for d in settings.slurm_directives)
    return (
        "#!/bin/bash\n"
        f"# gymslurm: the conversion of a checkpoint for watch {folder.name}\n"
        f"#SBATCH --job-name=gsw-{folder.name}-convert\n"
        f"#SBATCH --output={folder.logs}/convert-%j.out\n"
        "#SBATCH --time=01:00:00\n"
        f"{directives}\n"
        "set -eu\n"
        f"cd {shlex.quote(settings.workdir)}\n"
        f"{command}\n"
        f"mkdir -p {shlex.quote(str(output))} && touch {shlex.quote(str(output / CONVERTED_MARK))}\n"
    )


def _check_conversion(
    folder: WatchFolder, settings: WatchSettings, backend: WatchBackend, checkpoint: CheckpointState
) -> None:
    """The conversion job still live: on Slurm, submit the suite run behind it if a killed tick did not
    (afterok). Ended: record that it completed, or that it failed (once: never retried) and cancel the
    suite run that waited for it (Slurm keeps it pending forever: DependencyNeverSatisfied)."""
    assert checkpoint.convert_job is not None
    rows = backend.job_rows([checkpoint.convert_job])
    if any(row.state in LIVE_STATES for row in rows.values()):
        if checkpoint.run is None and settings.backend == "slurm":
            _submit(folder, settings, checkpoint, after_ok=[checkpoint.convert_job])
        return
    output = converted_path(folder, checkpoint)
    if (output / CONVERTED_MARK).is_file():
        folder.append(record("converted", digest=checkpoint.digest, checkpoint=str(output)))
        log(f"checkpoint {checkpoint.checkpoint}: converted into {output}")
        return
    if checkpoint.run is not None:  # first: a cancel that fails is tried again by the next tick
        from gymslurm.commands.cancel import cancel_run
        from gymslurm.launcher.run_site import run_backend
        from gymslurm.launcher.rundir import RunDir

        run = RunDir(Path(checkpoint.run))
        cancel_run(run, run_backend(run))
    reason = f"conversion job {checkpoint.convert_job} ended without completing (see {folder.logs})"
    folder.append(record("convert_failed", digest=checkpoint.digest, reason=reason))
    log(f"checkpoint {checkpoint.checkpoint}: {reason}")


def suite_name(folder: WatchFolder, checkpoint: CheckpointState) -> str:
    """The suite run's name for a checkpoint: the watch's name and the checkpoint's digest."""
    return f"{folder.name}-{checkpoint.digest[:12]}"


def _submit(
    folder: WatchFolder,
    settings: WatchSettings,
    checkpoint: CheckpointState,
    after_ok: list[str] | None = None,
) -> None:
    """Submit the checkpoint's suite run (or record the one a killed tick made); ``after_ok``: its
    first links wait for the conversion job to complete (Slurm), on the folder it will write."""
    from gymslurm.commands.new_suite import submit_suite
    from gymslurm.launcher.suite_settings import chain_settings, load_suite

    path = write_checkpoint_suite(folder, settings, checkpoint)
    os.chdir(settings.workdir)
    suite = load_suite(str(path), settings.overrides)
    run_root = (Path(settings.workdir) / chain_settings(suite)[0].run_root).resolve()
    existing = _run_of(run_root, suite_name(folder, checkpoint))
    if existing is None:
        submit_suite(
            suite, settings.overrides, settings.backend, dry_run=False, wait=False, after_ok=after_ok
        )
        existing = _run_of(run_root, suite_name(folder, checkpoint))
    if existing is None:
        raise GymslurmError(f"the suite run of {checkpoint.checkpoint} was not found under {run_root}")
    folder.append(record("submitted", digest=checkpoint.digest, run=str(existing)))
    log(f"checkpoint {checkpoint.checkpoint}: suite run {existing}")


def _run_of(run_root: Path, name: str) -> Path | None:
    """The run named ``<name>-<time>`` under ``run_root``, if one exists."""
    from gymslurm.launcher.rundir import find_runs

    runs = [run.root for run in find_runs(run_root) if run.name.startswith(f"{name}-")]
    return runs[0] if runs else None


def write_checkpoint_suite(folder: WatchFolder, settings: WatchSettings, checkpoint: CheckpointState) -> Path:
    """The watch's suite with ``{checkpoint}`` replaced, named for the checkpoint, in ``suites/``."""
    from gymslurm.store.atomic import publish_bytes

    data: dict[str, Any] = yaml.safe_load(Path(settings.suite).read_text())
    converts = settings.convert is not None
    model_input = str(converted_path(folder, checkpoint)) if converts else checkpoint.checkpoint
    data = with_checkpoint(data, model_input)
    data["name"] = suite_name(folder, checkpoint)
    path = folder.suites / f"{checkpoint.digest}.yaml"
    publish_bytes(path, yaml.safe_dump(data, sort_keys=False).encode())
    return path


def main(argv: list[str]) -> int:
    """``gymslurm watch-tick WATCH_FOLDER`` (internal: the watch's job runs it)."""
    if len(argv) != 1:
        print("usage: gymslurm watch-tick WATCH_FOLDER (internal: run by the watch's job)", file=sys.stderr)
        return 2
    return tick(WatchFolder(Path(argv[0]).resolve()))
