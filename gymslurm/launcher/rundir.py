"""The run directory: what a submission recorded, and where every file of a run lives.

Layout (all paths below ``<run_root>/<run name>/``)::

    run.json                      what was submitted: benchmark, shards, backend, workdir
    benchmark.yaml                the composed benchmark config, secrets replaced by a marker
    scripts/shard-NNN.sbatch      the rendered link script of each shard
    scripts/aggregate.sbatch      the rendered aggregation script
    inputs/shard-NNN.jsonl        each shard's contiguous slice of the dataset
    output/shard-NNN/<stem>.jsonl each shard's collector output (and its companions)
    output/merged/<stem>.jsonl    the aggregation's merged output
    shards/NNN/ledger.jsonl       each shard's chain ledger (gymslurm/launcher/ledger.py)
    shards/NNN/heartbeat.json     the running link's last sign of life (replaced atomically)
    array.json                    a Slurm run: the job arrays of every shard's first link (written once)
    scripts/links.sbatch          a Slurm run's link script for shards 0..chunk-1 (shard = array task id)
    scripts/links-BASE.sbatch     ... for shards BASE..BASE+chunk-1 past MaxArraySize (BASE + task)
    inputs/dataset.jsonl          an array run's dataset copy (each first link cuts inputs/shard-NNN.jsonl)
    shards/NNN/link.lock          held (flock) by the shard's live link for its whole run
    ledger.jsonl                  an array run's own records, read for each shard whose ledger is empty
                                  (``gymslurm cancel``: one record for every never-started shard)
    aggregate/ledger.jsonl        the aggregation job's ledger; aggregate/lock serialises its submission
    logs/                         job output (appended across requeues)
    local/                        the local backend's job queue

``run.json`` and ``benchmark.yaml`` are written once, at submit. Secrets never reach this folder.
``run.json`` and ``array.json`` carry their version in ``v`` (gymslurm/formats.py: ``run_info``,
``array``), checked before anything else is read of them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gymslurm.errors import ConfigError
from gymslurm.formats import version_of, versioned_object
from gymslurm.launcher.ledger import ChainState, Ledger, Record, Submitted, summarize
from gymslurm.process_env import SECRETS_ENV
from gymslurm.site.placement import Block, cluster_of
from gymslurm.store.atomic import publish_bytes
from gymslurm.store.tally import RunTally

if TYPE_CHECKING:
    from gymslurm.launcher.settings import BenchmarkSettings


class RunInfo(BaseModel):
    """``run.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: int = version_of("run_info")
    name: str
    benchmark: str
    overrides: list[str]
    created_at: str
    backend: Literal["slurm", "local"]
    shards: int
    workdir: str
    output_stem: str
    infra_retry_limit: int
    max_walltime_s: float | None
    accounting: bool | None = None  # Slurm keeps job accounting (sacct); None: not known (local, older runs)
    array: bool = False  # first links are one job array (array.json); every link runs scripts/links.sbatch
    cluster: str | None = None  # slurm.cluster: the Slurm cluster of every job (None: the default one)
    gpus: int = 0  # GPUs each link asks for (slurm.gpus or a --gres/--gpus directive)
    gpu_budget: float | None = None  # budget.gpu_hours at submit (resubmit raises are in aggregate/ledger)
    budget_warn_at: float = 0.8
    report_share: Literal["none", "group"] = "none"  # report.share: group makes report.html group-readable
    # slurm.clusters: which cluster runs which shards (placement.py's blocks, decided once at submit);
    # every job id of such a run names its cluster (``b:123_4``). None: a run on one cluster.
    placement: list[Block] | None = None
    aggregate_cluster: str | None = None  # where the aggregation of a run across clusters runs
    # submit --reverify: the run whose saved answers each shard re-grades (its root); None: a collection
    reverify_of: str | None = None
    # A random id given at submit (uuid4 hex): what makes a notification's ``id`` unique across runs,
    # run roots and clusters (launcher/notify.py); None in runs from before (their name stands in)
    uid: str | None = None
    # slurm.lookahead at submit: what ``status`` or a later ``submit`` queues when it completes the
    # queuing of a killed submit (None: a run from before; the setting's default then)
    lookahead: int | None = None
    # aggregation.enabled at submit (the saved benchmark's word, which resubmit never changes): status
    # asks it of every finished run without parsing benchmark.yaml; None: a run from before (it is read)
    aggregation: bool | None = None

    @property
    def clusters(self) -> list[str]:
        """Every cluster of a run across clusters (its blocks', then the aggregation's); [] otherwise."""
        names = [block.cluster for block in self.placement or []]
        if self.placement is not None and self.aggregate_cluster is not None:
            names.append(self.aggregate_cluster)
        return list(dict.fromkeys(names))

    def cluster_of(self, shard: int | None) -> str | None:
        """The cluster that runs ``shard``'s links (None: the aggregation's), by run.json's record."""
        if self.placement is None:
            return self.cluster
        return self.aggregate_cluster if shard is None else cluster_of(self.placement, shard)


class ArrayPart(BaseModel):
    """One job array of a run: shards ``base + offset`` .. ``base + offset + size - 1`` as task ids
    ``offset`` .. ``offset + size - 1`` of ``scripts/links-<base>.sbatch``. ``offset`` is not 0 only in
    a run across clusters, where a block of shards may start inside a base's range (placement.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str
    base: int
    size: int
    offset: int = 0
    # The part's spare arrays (issue 19's lookahead for first links): ``slurm.lookahead - 1`` arrays
    # of the same tasks, each ``afterany`` the one before (the first ``afterany`` this array). A first
    # link that acts cancels its spare tasks (strays); one killed before its first act leaves them:
    # the spare task runs once the array before it has ended. None: a run submitted before spares.
    spares: list[str] | None = None

    @property
    def first(self) -> int:
        """The first shard the array holds."""
        return self.base + self.offset


class ArrayRecord(BaseModel):
    """``array.json``: the job arrays holding every shard's first link, written once at submit.

    Shard ``i``'s first link is task ``i - base`` of the array whose ``base <= i < base + size``;
    its ledger records nothing until the task starts (so submitting 10,000 shards writes no 10,000
    ledgers): readers prepend that link (:meth:`RunDir.chain_records`). ``chunk`` is the task-id
    range each array covers (the site's ``MaxArraySize``), so a successor of shard ``i`` is task
    ``i % chunk`` of a one-task array of ``scripts/links-<i - i % chunk>.sbatch``. A record without
    ``parts`` (written before issue 19) is one array of every shard, base 0.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: int = version_of("array")
    job_id: str
    shards: int
    max_running: int | None
    at: str
    chunk: int | None = None
    parts: list[ArrayPart] | None = None
    throttle: int | None = None  # the plan's %N per array (what a job completing the queuing uses)
    # The sbatch under way (its --comment, written before it runs; None once its job id is recorded
    # in ``parts``): whoever completes a killed submit's queuing looks that job up before queuing
    # it again, so a sbatch that went through is never repeated (first_links.py).
    intent: str | None = None
    # The jobs every array (spares too) waits for to complete successfully (submit's afterok: a watch's
    # conversion job; version 2, issue 35): a completion from the login side keeps that wait
    # (first_links.py). None: no such wait (every version 1 record).
    after_ok: list[str] | None = None

    @property
    def arrays(self) -> list[ArrayPart]:
        """Every array of the first links queued so far (one for records written before ``parts``
        existed; none when submit recorded its plan and was killed before its first array)."""
        if self.parts is not None:
            return self.parts
        return [ArrayPart(job_id=self.job_id, base=0, size=self.shards)]

    def base(self, shard: int) -> int:
        """The first shard of the task-id range ``shard`` falls in."""
        chunk = self.chunk or max(self.shards, 1)
        return shard - shard % chunk

    def part(self, shard: int) -> ArrayPart | None:
        """The array holding ``shard``'s first link; None when no array holds it."""
        parts = self.arrays
        guess = shard // self.chunk if self.chunk else 0  # parts are in base order, one per chunk
        if guess < len(parts) and parts[guess].first <= shard < parts[guess].first + parts[guess].size:
            return parts[guess]
        return next((p for p in parts if p.first <= shard < p.first + p.size), None)

    def task(self, shard: int) -> str | None:
        """Shard ``shard``'s first link; None when no array holds it (submit died before queuing it:
        the shard reads STALLED and ``resubmit`` starts it)."""
        part = self.part(shard)
        return None if part is None else f"{part.job_id}_{shard - part.base}"

    def spare_tasks(self, shard: int) -> list[str]:
        """Shard ``shard``'s spare first links (tasks of its part's spare arrays), oldest first."""
        return self.first_links(shard)[1:]

    def first_links(self, shard: int) -> list[str]:
        """Shard ``shard``'s first link and its spares, oldest first (one lookup of its part); none when
        no array holds it."""
        part = self.part(shard)
        if part is None:
            return []
        task = shard - part.base
        return [f"{part.job_id}_{task}", *(f"{spare}_{task}" for spare in part.spares or [])]


@dataclass(frozen=True)
class RunDir:
    """Paths of one run."""

    root: Path

    @property
    def name(self) -> str:
        """The run's name (its folder name)."""
        return self.root.name

    @property
    def info_path(self) -> Path:
        """``run.json``."""
        return self.root / "run.json"

    @property
    def config_path(self) -> Path:
        """``benchmark.yaml`` (secrets removed)."""
        return self.root / "benchmark.yaml"

    def shard_dir(self, shard: int) -> Path:
        """The folder of a shard's ledger and heartbeat."""
        return self.root / "shards" / f"{shard:03d}"

    def ledger(self, shard: int) -> Ledger:
        """A shard's ledger."""
        return Ledger(self.shard_dir(shard) / "ledger.jsonl")

    def heartbeat(self, shard: int) -> Path:
        """A shard's heartbeat file."""
        return self.shard_dir(shard) / "heartbeat.json"

    def link_lock(self, shard: int) -> Path:
        """The lock a shard's live link holds: a second link of the shard finds it taken."""
        return self.shard_dir(shard) / "link.lock"

    @property
    def queuing_mark(self) -> Path:
        """Present while ``submit`` has not queued every first link yet (job/first_links.py)."""
        return self.root / "queuing"

    @property
    def submit_lock(self) -> Path:
        """Held by whoever queues first links: ``submit``, ``resubmit``, a job completing a killed submit."""
        return self.root / "submit.lock"

    def script(self, shard: int | None) -> Path:
        """A shard's link script, or the aggregation script for None."""
        name = "aggregate" if shard is None else f"shard-{shard:03d}"
        return self.root / "scripts" / f"{name}.sbatch"

    @property
    def links_script(self) -> Path:
        """The link script of shards 0..chunk-1 of a Slurm run (the shard is ``SLURM_ARRAY_TASK_ID``)."""
        return self.root / "scripts" / "links.sbatch"

    def links_script_for(self, base: int) -> Path:
        """The link script of the shards from ``base`` (shard = ``base`` + the array task id)."""
        return self.links_script if base == 0 else self.root / "scripts" / f"links-{base}.sbatch"

    @property
    def links_log_pattern(self) -> Path:
        """An array run's job output path: ``shard-NNN-<array>_<shard>.out``, the ledger's job id."""
        return self.root / "logs" / "shard-%3a-%A_%a.out"

    def links_log_pattern_for(self, base: int) -> Path:
        """Job output of the shards from ``base``: ``shard-<base>+<task>-<array>_<task>.out``."""
        return self.links_log_pattern if base == 0 else self.root / "logs" / f"shard-{base}+%a-%A_%a.out"

    @property
    def array_path(self) -> Path:
        """``array.json``."""
        return self.root / "array.json"

    @property
    def dataset_copy(self) -> Path:
        """An array run's copy of the dataset; each shard's first link cuts its own slice from it."""
        return self.root / "inputs" / "dataset.jsonl"

    def read_array(self) -> ArrayRecord | None:
        """``array.json``, or None for a run whose first links were submitted one by one."""
        try:
            return _read_record(self.array_path, ArrayRecord, "array")
        except FileNotFoundError:
            return None

    @property
    def run_ledger(self) -> Ledger:
        """``ledger.jsonl``: the run's own records, which stand for every shard of an array run whose
        ledger is still empty (``gymslurm cancel``'s one ``cancelled`` for all never-started shards)."""
        return Ledger(self.root / "ledger.jsonl")

    def chain_records(
        self,
        shard: int,
        array: ArrayRecord | None,
        present: frozenset[str] | None = None,
        run_records: list[Record] | None = None,
    ) -> list[Record]:
        """A shard's ledger records, preceded by its first link's submission when that was an array task.

        ``present``: one listing of ``shards/`` (a shard without a folder has no ledger yet: not opened).
        In an array run, a shard whose ledger holds nothing yet reads the run's records instead
        (:attr:`run_ledger`; ``run_records``: read once by a caller that reads every shard).
        """
        missing = present is not None and f"{shard:03d}" not in present
        records = [] if missing else self.ledger(shard).read()
        if array is None:
            return records
        jobs = array.first_links(shard)
        # the first link, then its spare tasks (the lookahead of first links)
        head: list[Record] = [
            Submitted(job_id=job, by="submit (array spare)" if i else "submit (array)", at=array.at)
            for i, job in enumerate(jobs)
        ]
        if not records:
            records = self.run_ledger.read() if run_records is None else run_records
        return [*head, *records]

    def chain_state(
        self,
        shard: int,
        array: ArrayRecord | None,
        present: frozenset[str] | None = None,
        run_records: list[Record] | None = None,
    ) -> ChainState:
        """The fold of :meth:`chain_records` (the one way launcher code reads a shard's chain)."""
        return summarize(self.chain_records(shard, array, present, run_records))

    def chain_states(self, array: ArrayRecord | None, shards: int) -> list[ChainState]:
        """Every shard's chain (one listing of ``shards/``, the run's records read once)."""
        present = folder_listing(self.root / "shards")
        shared = self.run_ledger.read() if array is not None else []
        return [self.chain_state(s, array, present, shared) for s in range(shards)]

    def log_pattern(self, shard: int | None) -> Path:
        """Job output path with ``%j`` for the job id."""
        name = "aggregate" if shard is None else f"shard-{shard:03d}"
        return self.root / "logs" / f"{name}-%j.out"

    def shard_input(self, shard: int) -> Path:
        """A shard's slice of the dataset."""
        return self.root / "inputs" / f"shard-{shard:03d}.jsonl"

    def shard_output(self, shard: int, stem: str) -> Path:
        """A shard's collector output."""
        return self.root / "output" / f"shard-{shard:03d}" / f"{stem}.jsonl"

    def merged_output(self, stem: str) -> Path:
        """The aggregation's merged output."""
        return self.root / "output" / "merged" / f"{stem}.jsonl"

    @property
    def aggregate_ledger(self) -> Ledger:
        """The aggregation job's ledger."""
        return Ledger(self.root / "aggregate" / "ledger.jsonl")

    @property
    def notify_ledger(self) -> Ledger:
        """The run's notifications: each event claimed once per receiver, then its delivery."""
        return Ledger(self.root / "notify.jsonl")

    @property
    def notify_lock(self) -> Path:
        """Held while an event is claimed (a moment)."""
        return self.root / "notify.lock"

    @property
    def delivery_lock(self) -> Path:
        """Held by the one notification delivery pass at a time (for as long as it sends)."""
        return self.root / "notify-delivery.lock"

    @property
    def tally(self) -> RunTally:
        """The run's tally of finished chains and spent GPU-hours (``store/tally.py``)."""
        return RunTally(self.root / "tally.jsonl")

    @property
    def aggregate_lock(self) -> Path:
        """The lock that makes the aggregation's submission exactly-once."""
        return self.root / "aggregate" / "lock"

    @property
    def aggregate_link_lock(self) -> Path:
        """The lock the live aggregation job holds: a second one finds it taken and exits."""
        return self.root / "aggregate" / "link.lock"

    @property
    def local_dir(self) -> Path:
        """The local backend's queue."""
        return self.root / "local"

    def read_info(self) -> RunInfo:
        """``run.json``, validated."""
        try:
            return _read_record(self.info_path, RunInfo, "run_info")
        except FileNotFoundError as error:
            raise ConfigError(f"{self.root} is not a gymslurm run: it has no run.json") from error

    def aggregation_enabled(self) -> bool:
        """Whether the saved benchmark has an aggregation step: run.json's record, else (a run from
        before it) the saved benchmark, read without its secrets, which ``status`` does not hold."""
        recorded = self.read_info().aggregation
        if recorded is not None:  # no YAML parse nor settings import (10-25 ms of a status' CPU)
            return recorded
        from omegaconf import OmegaConf

        from gymslurm.launcher.settings import AggregationSettings

        default = AggregationSettings().enabled
        try:
            saved = OmegaConf.to_container(OmegaConf.load(self.config_path), resolve=False)
        except FileNotFoundError:
            return default
        aggregation = saved.get("aggregation") if isinstance(saved, dict) else None
        return bool(aggregation.get("enabled", default)) if isinstance(aggregation, dict) else default

    def load_settings(self, environ: dict[str, str] | None = None) -> BenchmarkSettings:
        """The saved benchmark with secrets put back from ``GYMSLURM_SECRETS`` in the environment."""
        from omegaconf import OmegaConf

        from gymslurm.launcher.settings import RETIRED_ARRAY_KEY, merge_secrets, validate
        from gymslurm.redaction import learn

        data = OmegaConf.to_container(OmegaConf.load(self.config_path), resolve=False)
        env = os.environ if environ is None else environ
        secrets = json.loads(env.get(SECRETS_ENV, "{}"))
        assert isinstance(data, dict)
        merged: dict[str, Any] = merge_secrets(data, secrets)
        slurm = merged.get("slurm")
        if isinstance(slurm, dict) and slurm.get(RETIRED_ARRAY_KEY) is True:  # saved before it was retired:
            del slurm[RETIRED_ARRAY_KEY]  # true, the one value it could hold, is what every run does now
        learn(merged)  # from now on this process replaces them wherever it writes or prints
        return validate(merged, str(self.config_path))


_Record = TypeVar("_Record", RunInfo, ArrayRecord)


def _read_record(path: Path, model: type[_Record], kind: str) -> _Record:
    """A record submit wrote (``run.json``, ``array.json``): its version checked first, then validated."""
    raw = versioned_object(
        path.read_bytes(), kind, str(path), ConfigError, "it is not a record this gymslurm wrote"
    )
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(f"{path} is not a {path.name} this gymslurm understands: {error}") from error


def folder_listing(folder: Path) -> frozenset[str]:
    """One listing of a run folder (``shards/``, ``output/``); empty when it does not exist."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def find_runs(run_root: Path) -> list[RunDir]:
    """Every run under ``run_root``, oldest first."""
    if not run_root.is_dir():
        return []
    return sorted((RunDir(p.parent) for p in run_root.glob("*/run.json")), key=lambda r: r.name)


def resolve_run(ref: str, run_root: Path) -> RunDir:
    """A run given as a path or as a name under ``run_root``."""
    for candidate in (Path(ref), run_root / ref):
        if (candidate / "run.json").is_file():
            return RunDir(candidate.resolve())
    known = ", ".join(r.name for r in find_runs(run_root)[-5:]) or "none"
    raise ConfigError(f"no run {ref!r} (looked at {ref} and {run_root / ref}); recent runs: {known}")


def chain_states(run: RunDir, shards: int) -> list[ChainState]:
    """Every shard's chain state, then the aggregation's (array runs: first links from array.json)."""
    return [*run.chain_states(run.read_array(), shards), summarize(run.aggregate_ledger.read())]


def _find_run_by_job(job_id: str, run_root: Path) -> RunDir | None:
    for run in reversed(find_runs(run_root)):
        array = run.read_array()
        if array is not None and job_id == array.job_id:
            return run
        if any(job_id in state.jobs for state in chain_states(run, run.read_info().shards)):
            return run
    return None


def resolve_run_or_job(ref: str, run_root: Path) -> RunDir:
    """A run named, given by path, or found by the id of one of its jobs."""
    try:
        return resolve_run(ref, run_root)
    except ConfigError:
        found = _find_run_by_job(ref, run_root)
        if found is None:
            raise
        return found


def shard_slice(lines: list[bytes], shards: int, shard: int) -> list[bytes]:
    """Shard ``shard``'s contiguous slice of a dataset's non-empty lines (the one split rule; pure)."""
    return lines[shard * len(lines) // shards : (shard + 1) * len(lines) // shards]


def dataset_lines(data: bytes) -> list[bytes]:
    """A dataset's non-empty lines, each ending in a newline."""
    return [p if p.endswith(b"\n") else p + b"\n" for p in data.splitlines(keepends=True) if p.strip()]


def ensure_shard_input(run: RunDir, shard: int, shards: int) -> Path:
    """An array run's shard input, cut from the dataset copy by the shard's first link if missing."""
    path = run.shard_input(shard)
    if not path.exists():
        atomic_write(path, b"".join(shard_slice(dataset_lines(run.dataset_copy.read_bytes()), shards, shard)))
    return path


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically (store.atomic's publish), creating its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    publish_bytes(path, data)


def queuing_left(run: RunDir) -> bool:
    """A killed submit left first links to queue: its mark is there, or array.json records a plan with
    no array queued (submit was killed between the two writes). A test of the run's files, here so
    that ``status`` of a run with nothing left to queue imports none of the code that queues it."""
    if run.queuing_mark.exists():
        return True
    record = run.read_array()
    return record is not None and record.parts == []


def suite_record_path(run: RunDir) -> Path:
    """``suite.json`` of a run (absent: the run is one benchmark's)."""
    return run.root / "suite.json"


def is_suite(run: RunDir) -> bool:
    """Whether ``run`` is a suite run (a file test: launcher/suite_run.py reads the suite)."""
    return suite_record_path(run).is_file()
