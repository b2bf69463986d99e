"""The one version gate of every format gymslurm writes: which field holds the version, which is read.

Every reader calls :func:`check_version` before it looks at anything else in a file or record, and
every writer takes the version it stamps from :data:`FORMATS`, so the table below is the whole
answer to "which versions does this gymslurm read" (inspect_ai's single version gate is the model).
The fields keep their historical spellings on disk (``format_version``, ``v``, ``schema_version``,
the reservation table's binary header): renaming them would make existing runs unreadable.
docs/formats.md describes each format. :func:`json_object` and :func:`versioned_object` are the one
reading of a JSON document's bytes: an object first, then (a versioned kind) its version, then fields.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True)
class Format:
    """One on-disk (or on-pipe) format: its name for messages, its version field and the version read."""

    name: str
    field: str
    version: int
    advice: str = "read it with the gymslurm version that wrote it, or move the run's files aside"
    older: tuple[int, ...] = ()  # earlier versions still read (the reader upgrades them); never written
    implied: int | None = None  # the version of a document without the field (None: it is required)

    @property
    def read(self) -> tuple[int, ...]:
        """Every version this gymslurm reads: the older ones, then the one it writes."""
        return (*self.older, self.version)


# A live file (store/live.py) is replaced whole by its one writer every few seconds: losing it loses nothing.
_LIVE_ADVICE = "delete the file; its writer replaces it"

FORMATS: dict[str, Format] = {
    # manifest v3 (issue 34): the run's tasks are in <stem>_gymslurm_inputs.jsonl, and
    # <stem>_materialized_inputs.jsonl is NeMo Gym's file in NeMo Gym's shape; v2 runs (the tasks under
    # NeMo Gym's name) still read.
    "manifest": Format("the run manifest", "format_version", 3, older=(2,)),
    "adoptions": Format("the adoption journal", "format_version", 1),
    "reservations": Format("the reservation table", "header version", 1),
    "failure_record": Format("the failure record", "schema_version", 1),
    "coverage": Format("the coverage file", "format_version", 1),
    "aggregate_coverage": Format("the merged coverage file", "format_version", 1),
    "health": Format("the health report", "format_version", 1),
    "gymslurm_metrics": Format("gymslurm's metrics file", "format_version", 1),
    "rewards": Format("the merged reward histogram", "format_version", 1),
    "suite_metrics": Format(
        "the suite metrics (suite_metrics.json)",
        "format_version",
        1,
        "the suite's aggregation job writes it again ('gymslurm resubmit RUN' reruns it)",
    ),
    "run_summary": Format(
        "the run's summary (summary.json)",
        "format_version",
        1,
        "move it aside: 'gymslurm status RUN --json' gives the same figures",
    ),
    # ledger v2 (issue 17): a decision no longer carries the coverage summary that nothing read;
    # v1 lines still read (launcher/ledger.py drops that field), so a chain may span the upgrade.
    # ledger v3 (issue 33): a decision's busy_s and the slurm_end record (both first written as v2,
    # which a gymslurm before them refused as an unknown field, not as a newer version); v2 lines
    # with or without them still read.
    "ledger": Format("the chain ledger", "v", 3, "use the gymslurm version that wrote it", older=(1, 2)),
    # finished_seal v2 (issue 33): the servers' answers, asked again before a seal answers; a v1
    # seal kept none, so it cannot prove them: it is ignored (the full path seals again).
    "finished_seal": Format(
        "the finished-run seal",
        "format_version",
        2,
        "nothing to do: the next resume ignores it and writes it again",
    ),
    "merge_seal": Format(
        "a suite benchmark's merge seal (aggregate/merged_seal.json)",
        "format_version",
        1,
        "nothing to do: the suite's next aggregation ignores it, merges the benchmark again and reseals it",
    ),
    "outcome_index": Format(
        "the outcome index",
        "format_version",
        1,
        "nothing to do: a reconcile ignores it and the run's writer writes it again",
    ),
    "run_tally": Format(
        "the run's tally (tally.jsonl)",
        "v",
        1,
        "move it aside: the next link that finds every chain finished counts them again",
    ),
    # progress v2 (issue 30): ``in_flight_s`` and ``requests`` (a suite link weighs each benchmark's
    # work left by them); v1 records still read (both 0: not measured).
    "progress": Format("the live progress record", "format_version", 2, _LIVE_ADVICE, older=(1,)),
    "heartbeat": Format("the heartbeat", "format_version", 1, _LIVE_ADVICE),
    # printed documents: `gymslurm compare --json` (comparison.py) and `gymslurm gate --json` (gate.py)
    "comparison": Format(
        "the comparison document",
        "format_version",
        1,
        "make it again with `gymslurm compare --json` of this gymslurm",
    ),
    "gate": Format("the gate decision", "format_version", 1, "run `gymslurm gate --json` again"),
    # a watch (docs/watch.md): watch.json, written once, and its append-only ledger
    "watch": Format("the watch settings (watch.json)", "format_version", 1, "start a new watch"),
    "watch_ledger": Format(
        "the watch ledger", "v", 1, "read it with the gymslurm version that wrote it (gymslurm status WATCH)"
    ),
    # supervision_event v2 (issue 30): the ``share`` event (a suite collector's share of the model
    # server, changed while it runs), which a collector before it refused as malformed; v1 still reads.
    "supervision_event": Format(
        "the supervision event",
        "v",
        2,
        "run the link and the collector from the same gymslurm installation",
        older=(1,),
    ),
    # The launcher's run folder: what submit recorded (launcher/rundir.py), read by every command after.
    # ``v`` may be left out of run.json and array.json: the models always read its absence as 1.
    "run_info": Format(
        "the run record (run.json)", "v", 1, "use the gymslurm version that submitted the run", implied=1
    ),
    # array v2 (issue 35): ``after_ok``, the jobs the first links wait for (a watch's conversion), which
    # a gymslurm before it would refuse as an unknown field; v1 records (none) still read.
    "array": Format(
        "the job-array record (array.json)",
        "v",
        2,
        "use the gymslurm version that submitted the run",
        older=(1,),
        implied=1,
    ),
    # Printed documents (launcher/views/document.py): written, never read back; a script reads the field.
    "status": Format("the status document (status --json)", "version", 1),
    "report": Format("the report's data (report.html)", "version", 1),
}


def version_of(kind: str) -> int:
    """The version this gymslurm writes (and reads; see ``Format.older`` for earlier ones) for ``kind``."""
    return FORMATS[kind].version


def version_problem(kind: str, found: object) -> str | None:
    """Why ``found`` is not a version of ``kind`` this gymslurm reads, or None when it is."""
    fmt = FORMATS[kind]
    if type(found) is int and found in fmt.read:
        return None
    versions = f"version {fmt.version} only" if not fmt.older else "versions " + ", ".join(map(str, fmt.read))
    advice = fmt.advice
    if type(found) is int and found > fmt.version:  # not a damaged file: a newer writer's
        upgrade = f"it was written by a newer gymslurm; upgrade gymslurm (to one that reads version {found})"
        advice = f"{upgrade}, or {advice}"  # the format's own way out stays open
    return (
        f"{fmt.name} is version {found!r} ({fmt.field} {found!r}); this gymslurm reads {versions}: {advice}"
    )


def check_version(kind: str, found: object, where: str, error: type[Exception]) -> None:
    """Raise ``error`` naming ``where`` unless ``found`` is the version of ``kind`` this gymslurm reads.

    The caller names the error (one of errors.py's tree, as its file's reader raises), so this table
    stands on nothing: every rule that stamps a version can stand on the ground too."""
    problem = version_problem(kind, found)
    if problem is not None:
        raise error(f"{where}: {problem}")


def json_object(raw: bytes | str, where: str, error: type[Exception], remedy: str) -> dict[str, Any]:
    """``raw`` as one JSON object, or ``error`` naming ``where`` (a file, ``file:line``) and ``remedy``.

    One reading for a document, a record line and a dataset row, so each refuses bad bytes alike."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as problem:
        raise error(f"{where} is not valid JSON ({problem}): {remedy}") from None
    if not isinstance(data, dict):
        raise error(f"{where} is a JSON {type(data).__name__}, not an object: {remedy}")
    return data


def versioned_object(
    raw: bytes | str, kind: str, where: str, error: type[Exception], remedy: str | None = None
) -> dict[str, Any]:
    """:func:`json_object` of a ``kind`` document (``remedy``: the format's advice unless given), its
    version field checked before any other field is read."""
    fmt = FORMATS[kind]
    data = json_object(raw, where, error, fmt.advice if remedy is None else remedy)
    check_version(kind, data.get(fmt.field, fmt.implied), where, error)
    return data
