"""What one link holds while it runs, shared by its phases (link.py, gates.py, after_decision.py).

A link reads its shard's ledger once per phase (at its start, after its collector) and keeps the
chain up to date with what it writes itself in between (:class:`Chain`); the rest is who it is
(:class:`LinkContext`: the run, the shard, the job) and what it has learned so far (its start
record, the run's GPU budget and spend). The gates before the start and the steps after the
decision are functions of a :class:`LinkContext`, so a feature adds a function, not a branch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gymslurm.job.chain import ensure_lookahead
from gymslurm.job.heartbeat import Signals
from gymslurm.job.spend import run_spend
from gymslurm.launcher.decide import Limits
from gymslurm.launcher.ledger import ChainState, Ledger, Record, Started, fold, summarize
from gymslurm.launcher.notify import Notifier
from gymslurm.launcher.rundir import RunDir
from gymslurm.launcher.settings import BenchmarkSettings
from gymslurm.site.backend import Backend, SlurmBackend


@dataclass
class Chain:
    """A shard's chain as this link holds it: the records of one read of its ledger, then every record
    the link appended since, and their fold."""

    records: list[Record]
    state: ChainState

    @classmethod
    def read(cls, run: RunDir, shard: int) -> Chain:
        """One read of the shard's ledger (and, in an array run, array.json)."""
        records = run.chain_records(shard, run.read_array())
        return cls(records, summarize(records))

    def add(self, record: Record) -> None:
        """A record this link appended: folded in, as a re-read would."""
        self.records.append(record)
        fold(self.state, record)


@dataclass
class LinkContext:
    """One link of shard ``shard``'s chain, run as job ``me`` (job id, restart count)."""

    run: RunDir
    shard: int
    settings: BenchmarkSettings
    backend: Backend
    me: tuple[str, int]
    signals: Signals
    chain: Chain
    budget: float | None = None  # the run's GPU-hours budget with every raise (None: no budget)
    spent: float = 0.0  # the run's GPU-hours spent, as last read
    started: Started | None = None  # this link's start record, once written
    notifier: Notifier | None = None
    excluded: list[str] = field(default_factory=list)  # the chain's bad nodes: its links are queued off them

    @property
    def job(self) -> str:
        return self.me[0]

    @property
    def ledger(self) -> Ledger:
        return self.run.ledger(self.shard)

    @property
    def output(self) -> Path:
        return self.run.shard_output(self.shard, self.settings.output_stem)

    @property
    def limits(self) -> Limits:
        slurm = self.settings.slurm
        return Limits(
            slurm.infra_retry_limit, slurm.max_walltime_s, slurm.max_links_without_progress, self.budget
        )

    def read_spend(self) -> None:
        """The run's budget and spend now (:func:`run_spend`), this chain's records as the link holds them."""
        self.budget, self.spent = run_spend(self.run, self.settings, (self.shard, self.chain.records))

    def ensure_lookahead(self, state: ChainState | None = None, *, recheck: bool = True) -> list[str]:
        """The links queued behind this job (:func:`ensure_link_lookahead`), from the chain as held."""
        held = self.chain.state if state is None else state
        return ensure_link_lookahead(
            self.run,
            self.shard,
            self.job,
            self.backend,
            self.settings,
            state=held,
            recheck=recheck,
            exclude=self.excluded,
        )


def submit_link(
    run: RunDir, shard: int, backend: Backend, after: list[str], exclude: list[str] | None = None
) -> str:
    """Queue a link of ``shard``: on Slurm a one-task array of its range's links script (task
    ``shard - base``), so every link of every shard is an array task of the same script, kept off
    the chain's bad nodes (``exclude``; the local backend has one node)."""
    array = run.read_array() if isinstance(backend, SlurmBackend) else None
    if array is not None and isinstance(backend, SlurmBackend):
        base = array.base(shard)
        task = shard - base
        script = run.links_script_for(base)
        return f"{backend.submit_array(script, str(task), after=after, exclude=exclude or [])}_{task}"
    return backend.submit(run.script(shard), after=after)


def shard_state(run: RunDir, shard: int) -> ChainState:
    """The shard's chain as its ledger (and, in an array run, array.json) tells it."""
    return run.chain_state(shard, run.read_array())


def ensure_link_lookahead(
    run: RunDir,
    shard: int,
    me: str,
    backend: Backend,
    settings: BenchmarkSettings,
    *,
    state: ChainState | None = None,
    recheck: bool = True,
    exclude: list[str] | None = None,
) -> list[str]:
    """The links queued behind this job (:func:`gymslurm.job.chain.ensure_lookahead`), from
    ``state`` (the chain as the caller holds it; read when not given), which gets what is queued.
    ``recheck`` False: a cancel that raced a link queued here is caught by the link's read after its
    collector, not by reading the ledger again now."""
    return ensure_lookahead(
        run.ledger(shard),
        me,
        backend,
        lambda after: submit_link(run, shard, backend, [after], exclude),
        state=shard_state(run, shard) if state is None else state,
        reread=(lambda: shard_state(run, shard)) if recheck else None,
        depth=settings.slurm.lookahead,
    )
