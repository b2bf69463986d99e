"""The aggregation job: queued exactly once when every shard's chain has finished, then the merge.

Submitted under the run's aggregate lock by whichever link (or ``resubmit``) sees the last chain
finish, so shards that end in the same second queue one aggregation between them.
"""

from __future__ import annotations

import glob
import socket
import time
from pathlib import Path

from gymslurm.exitcodes import ExitCode
from gymslurm.launcher.backend import Backend
from gymslurm.launcher.decide import Budgets, Decision, JobEnd, Verdict
from gymslurm.launcher.job.collector_process import run_collector
from gymslurm.launcher.job.heartbeat import Signals, log
from gymslurm.launcher.ledger import Started, Submitted, record_decision, summarize
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.store.flock import locked


def maybe_submit_aggregation(
    run: RunDir, settings: BenchmarkSettings, backend: Backend, me: str | None
) -> str | None:
    """Submit the aggregation job if every shard's chain finished and nobody did yet (under a lock)."""
    if not settings.aggregation.enabled:
        return None
    with locked(run.aggregate_lock):
        states = [summarize(run.ledger(s).read()) for s in range(settings.shards)]
        if not all(s.finished and not s.cancelled for s in states):
            return None
        if summarize(run.aggregate_ledger.read()).epoch_jobs:
            return None
        job = backend.submit(run.script(None), after=[me] if me else [])
        run.aggregate_ledger.append(Submitted(job_id=job, after=me, by=me or "resubmit"))
    log(f"every shard's chain finished: aggregation job {job} queued")
    return job


def aggregate_argv(
    settings: BenchmarkSettings, inputs: list[Path], output: Path, inputs_glob: str = ""
) -> list[str]:
    """The aggregation command: ``{inputs}`` becomes one argument per shard output, ``{inputs_glob}``
    one glob matching them all (no per-file argv at 1,000 shards), ``{output}`` the merged path."""
    argv: list[str] = []
    for part in settings.aggregation.command:
        if part == "{inputs}":
            argv += [str(path) for path in inputs]
        elif part == "{inputs_glob}":
            argv.append(inputs_glob)
        else:
            argv.append(part.replace("{output}", str(output)))
    return argv


def shard_outputs_glob(run: RunDir, stem: str) -> str:
    """A glob matching every shard's output of a run (and nothing else: not the merged output)."""
    return f"{glob.escape(str(run.root / 'output'))}/shard-*/{glob.escape(stem)}.jsonl"


def run_aggregation(run: RunDir, settings: BenchmarkSettings, me: tuple[str, int]) -> int:
    """The aggregation step: apply the FAILED-shard policy, run ``aggregate``, record the outcome."""
    signals = Signals()
    signals.install()
    ledger = run.aggregate_ledger
    started = Started(job_id=me[0], restart_count=me[1], host=socket.gethostname())
    ledger.append(started)
    states = [summarize(run.ledger(s).read()) for s in range(settings.shards)]
    incomplete = [
        s for s, st in enumerate(states) if not st.last_decision or st.last_decision.decision != Decision.DONE
    ]
    outputs = [run.shard_output(s, settings.output_stem) for s in range(settings.shards)]
    t0 = time.monotonic()
    if incomplete and settings.aggregation.on_failed_shard == "fail":
        code: int | None = ExitCode.STOP
        reason = f"shards {incomplete} did not complete and on_failed_shard=fail: nothing merged"
    else:
        existing = [path for path in outputs if path.exists()]
        merged = run.merged_output(settings.output_stem)
        merged.parent.mkdir(parents=True, exist_ok=True)
        pattern = shard_outputs_glob(run, settings.output_stem)
        code, _ = run_collector(aggregate_argv(settings, existing, merged, pattern), signals)
        reason = f"aggregate exited {code}"
        if incomplete:
            reason += f"; merged what exists: shards {incomplete} are incomplete (aggregate-what-exists)"
    decision = Decision.DONE if code == 0 else Decision.STOP_FAILED
    end = JobEnd("RUNNING", code, time.monotonic() - t0)
    verdict = Verdict(decision, reason, Budgets(jobs=1, walltime_s=end.elapsed_s))
    record_decision(ledger, started, end, Budgets(), verdict)
    log(f"aggregation {decision}: {reason}")
    return ExitCode.DONE if code == ExitCode.DONE else ExitCode.STOP
