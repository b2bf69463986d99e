"""Materialization: dataset rows become the logical rollouts a run collects. Pure (bytes in, dicts out).

A run's tasks are fixed once, here, and saved through the run store as
``<stem>_materialized_inputs.jsonl`` (docs/formats.md); their digest is part of the identity, so a
changed dataset, ``limit``, ``num_repeats`` or prompt template changes what a resume compares.

Row shapes accepted (one JSON object per line):

- **native**: ``{"task_id": {"taskset": ..., "task_id": ...}, "task_input": {...}}`` — sent as is;
- **plain**: any other object. The whole row (minus ``_ng_*`` keys) is the ``task_input``; its task
  id is the row's ``task_id`` when that is a string or integer, else its position in the dataset; its
  taskset is ``taskset`` (a setting) or the dataset file's stem.

Rollout ids (docs/formats.md "Rollout identity"): an explicit ``_ng_rollout_id`` is kept for one copy
and gets ``-r<k>`` for repeat ``k``; otherwise ``<taskset>-<task_id>`` (``-r<k>`` for repeats) with
characters outside ``[A-Za-z0-9._-]`` replaced by ``_``. Every id is checked (pattern, the reserved
``-a<N>`` suffix, uniqueness) before anything is dispatched.

**Repeated rows** (NeMo Gym's materialized file of a ``num_repeats > 1`` run): a row carrying both
``_ng_task_index`` and ``_ng_rollout_index`` (integers >= 0) is already one rollout. It keeps those
indices and NeMo Gym's id, ``_ng_rollout_id`` or else ``<task index>-<rollout index>`` (NeMo Gym's
``maybe_rollout_id_from_run_body``); a plain row's task id is its ``task_id`` or its task index, so the
copies of one task share it. Such a file is not repeated again: ``num_repeats > 1`` is refused.

**A given task index** (a row with ``_ng_task_index`` alone, as ``gymslurm submit`` stamps each
shard's rows so that indices are the whole dataset's, not the shard's) is kept, as NeMo Gym keeps
an upstream slicer's; rows that share one are that task's rollouts in turn. A later copy of a row
is stamped with its copy number too (``_gymslurm_task_copy``: 1 for the second appearance in the
whole dataset, ...): its rollout indices start at copy × ``num_repeats``, so copies cut into
different shards do not both take rollout 0 (they did: two rows with one rollout id in the merged
output). It is metadata, never part of a plain row's ``task_input``.

**Identical rows are one task** (NeMo Gym 0.7.0's ``row_to_task_idx``): task indices number the
distinct rows in order of first appearance, and a row equal to an earlier one (the same JSON object,
keys in the same order) is that task again, its rollout indices going on from the earlier copies'
(five identical rows: task 0, rollouts 0..4). Its rollout id is the task's with ``-r<rollout index>``.
Finding them holds no row: :func:`identical_rows` keeps 8 bytes of hash per row while it reads, and
only rows whose hash repeats are compared by content as the tasks are made. Trade-off: NeMo Gym
compares raw lines, so two lines of one object spelled with other whitespace are one task here and
two there (docs/nemo-gym.md).

Trade-off: repeats are laid out row-major (row 0's copies, then row 1's ...), as NeMo Gym does, so
the rollout index of a task depends on ``num_repeats``; that is fine because ``num_repeats`` is part
of the identity anyway.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import orjson

from gymslurm.errors import ConfigError, InvalidRolloutIdError
from gymslurm.formats import json_object
from gymslurm.nemogym_rows import RowPreparation, prepare_row, refuse_for_task, with_seed
from gymslurm.records import ROLLOUT_ID_PATTERN, rollout_id_problem

ROLLOUT_ID_KEY = "_ng_rollout_id"
TASK_INDEX_KEY, ROLLOUT_INDEX_KEY = "_ng_task_index", "_ng_rollout_index"
EXPECTED_DURATION_KEY = "_ng_expected_duration_s"
TASK_COPY_KEY = "_gymslurm_task_copy"  # submit's stamp: the how-manieth appearance of this task (module doc)
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class MaterializeOptions:
    """The settings that decide the materialized tasks (all part of the run's identity)."""

    dataset_name: str
    num_repeats: int = 1
    limit: int | None = None
    prompt_template: str | None = None
    prompt_field: str = "prompt"
    # NeMo Gym's default routing (no server named): each flat row's taskset is its agent_ref's name,
    # which must be one of these agents (the ones a single Environment Server fronts). None: off.
    agents: frozenset[str] | None = None
    # NeMo Gym's preparation of flat rows (its prompt config, its responses_create_params overrides).
    nemo_gym: RowPreparation = field(default_factory=RowPreparation)


def source_digest(data: bytes) -> str:
    """``sha256:<hex>`` of the source dataset's bytes (the manifest's ``source_digest``)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def parse_rows(data: bytes, source: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL dataset (blank lines skipped), stopping after ``limit`` rows."""
    return list(iter_rows(data.splitlines(), source, limit))


def iter_rows(lines: Iterable[bytes], source: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """:func:`parse_rows` one row at a time, from a dataset's lines (a file read as it goes)."""
    count = 0
    for number, line in enumerate(lines, start=1):
        if limit is not None and count >= limit:
            break
        if not line.strip():
            continue
        row = json_object(
            line, f"{source}:{number}", ConfigError, "fix or remove that line: one JSON object per line"
        )
        count += 1
        yield row


def materialize(rows: Iterable[dict[str, Any]], options: MaterializeOptions) -> list[dict[str, Any]]:
    """The logical rollouts of ``rows`` in rollout-index order, ids checked; rows are not modified."""
    rows = list(rows)
    tasks = list(iter_tasks(rows, options, identical_rows(rows, options)))
    check_rollout_ids(tasks)
    return tasks


@dataclass(frozen=True)
class IdenticalRows:
    """What repeats among rows: the hashes of contents, and the given task indices, met more than once.

    Only rows in these sets are tracked as tasks are made. Hashes are this process's (``hash`` of
    bytes), so an ``IdenticalRows`` is never saved.
    """

    hashes: frozenset[int]
    indices: frozenset[int] = frozenset()


def row_key(row: dict[str, Any]) -> bytes:
    """What makes two rows identical: the object's content, keys in their order (one compact line)."""
    return orjson.dumps(row)


def identical_rows(rows: Iterable[dict[str, Any]], options: MaterializeOptions) -> IdenticalRows:
    """One pass over ``rows`` (8 bytes kept per row) finding the contents and given indices that repeat."""
    hashes, given = array("q"), array("q")
    for position, row in enumerate(rows):
        if options.limit is not None and position >= options.limit:
            break
        index = given_task_index(position, row)
        if index is not None:
            given.append(index)
        elif repeated_row_indices(position, row) is None:
            hashes.append(hash(row_key(row)))
    return IdenticalRows(_repeating(hashes), _repeating(given))


def _repeating(values: array[int]) -> frozenset[int]:
    ordered = sorted(values)
    pairs = zip(ordered, islice(ordered, 1, None), strict=False)
    return frozenset(a for a, b in pairs if a == b)


class _TaskNumbers:
    """Each row's task as ``[task index, next rollout index]``: distinct contents numbered by first
    appearance, a given index kept; only what :class:`IdenticalRows` says repeats is remembered."""

    def __init__(self, identical: IdenticalRows) -> None:
        self.identical, self.next_task = identical, 0
        self.by_content: dict[bytes, list[int]] = {}
        self.by_index: dict[int, list[int]] = {}

    def of_content(self, row: dict[str, Any]) -> list[int]:
        key = row_key(row) if self.identical.hashes else b""
        if key and hash(key) in self.identical.hashes:
            task = self.by_content.get(key)
            if task is None:
                task = self.by_content[key] = self._new()
            return task
        return self._new()

    def of_index(self, index: int) -> list[int]:
        if index in self.identical.indices:
            return self.by_index.setdefault(index, [index, 0])
        return [index, 0]

    def _new(self) -> list[int]:
        self.next_task += 1
        return [self.next_task - 1, 0]


def stamp_task_indices(lines: list[bytes]) -> list[bytes]:
    """The dataset's lines, each object given its ``_ng_task_index`` in the whole dataset.

    ``gymslurm submit`` stamps before it cuts shards, so each shard's tasks keep the dataset's
    indices (identical rows one task, module docstring) and a merged run's task indices are the
    whole dataset's, as NeMo Gym's per-task metrics group them. A line is extended in place (its
    other bytes kept); one that already has a task index, or is not a JSON object, is left as it is
    (the collector refuses a bad line by its number). Two parses a line; 8 bytes kept a line.
    """
    rows = (row for line in lines if (row := _stampable(line)) is not None)
    numbers = _TaskNumbers(identical_rows(rows, MaterializeOptions(dataset_name="")))
    stamped = []
    for line in lines:
        row = _stampable(line)
        if row is None:
            stamped.append(line)
            continue
        task = numbers.of_content(row)  # [task index, copies met so far]
        body, copy = line.rstrip()[:-1].rstrip(), b""
        if task[1]:
            copy = b', "%s": %d' % (TASK_COPY_KEY.encode(), task[1])
        task[1] += 1
        comma = b"" if body.endswith(b"{") else b", "
        stamped.append(b'%s%s"%s": %d%s}\n' % (body, comma, TASK_INDEX_KEY.encode(), task[0], copy))
    return stamped


def _stampable(line: bytes) -> dict[str, Any] | None:
    """The row of a line :func:`stamp_task_indices` extends: a JSON object with neither index."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if isinstance(row, dict) and TASK_INDEX_KEY not in row and ROLLOUT_INDEX_KEY not in row:
        return row
    return None


def iter_tasks(
    rows: Iterable[dict[str, Any]], options: MaterializeOptions, identical: IdenticalRows
) -> Iterator[dict[str, Any]]:
    """:func:`materialize` one task at a time, ids *not* checked (:func:`scan_tasks` checks a stream).

    ``identical`` is :func:`identical_rows` of the same rows: a row equal to an earlier one is that
    task again, as are rows given one task index (module docstring).
    """
    numbers = _TaskNumbers(identical)
    for position, row in enumerate(rows):
        if options.limit is not None and position >= options.limit:
            break
        given = given_task_index(position, row)
        indices = repeated_row_indices(position, row) if given is None else None
        if indices is not None:
            yield _repeated_copy(position, row, indices, options)
            continue
        task = numbers.of_content(row) if given is None else numbers.of_index(given)
        copy = task_copy(position, row) if given is not None else 0
        first = copy * options.num_repeats if copy else task[1]
        yield from _expand(task[0], first, row, options)
        task[1] = max(task[1], first + options.num_repeats)


@dataclass(frozen=True)
class TaskScan:
    """What one checked pass over a materialization found: how many tasks, and their ``inputs_digest``."""

    count: int
    digest: str


def scan_tasks(tasks: Callable[[], Iterable[dict[str, Any]]]) -> TaskScan:
    """:func:`check_rollout_ids` and :func:`inputs_digest` of a stream, holding no task.

    ``tasks`` makes the stream (called once, or twice when two ids share a hash): each id is checked
    as it is met, and 8 bytes of its hash kept; ids whose hashes repeat are compared in a second pass
    (a real repeat raises naming both dataset rows, a hash collision does not). Trade-off: an invalid
    id is reported before a repeated id earlier in the file (the list check reports the first of either).
    """
    hashes = array("q")
    sha = hashlib.sha256()
    option = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    valid = ROLLOUT_ID_PATTERN.fullmatch
    for index, task in enumerate(tasks()):
        rollout_id = task["_ng_rollout_id"]
        if not (type(rollout_id) is str and valid(rollout_id) and "-a" not in rollout_id):
            _refuse_id(index, task)
        hashes.append(hash(rollout_id))
        sha.update(orjson.dumps(task, option=option))
    ordered = sorted(hashes)
    shared = {a for a, b in zip(ordered, islice(ordered, 1, None), strict=False) if a == b}
    if shared:
        seen: dict[str, dict[str, Any]] = {}
        for task in tasks():
            rollout_id = task["_ng_rollout_id"]
            if hash(rollout_id) in shared:
                if rollout_id in seen:
                    raise _repeated(rollout_id, seen[rollout_id], task)
                seen[rollout_id] = task
    return TaskScan(len(hashes), "sha256:" + sha.hexdigest())


def _expand(
    task_index: int, first_rollout: int, row: dict[str, Any], options: MaterializeOptions
) -> list[dict[str, Any]]:
    """One row's ``num_repeats`` rollouts: task ``task_index``, rollout indices from ``first_rollout``."""
    task_id, task_input = _task_of(task_index, row, options)
    if options.prompt_template is not None:
        task_input = _apply_template(options.prompt_template, options.prompt_field, task_input, task_index)
    base_id = _base_rollout_id(row, task_id)
    duration = row.get(EXPECTED_DURATION_KEY)
    alone = options.num_repeats == 1 and first_rollout == 0  # so far the task's one rollout: no suffix
    copies = []
    for repeat in range(first_rollout, first_rollout + options.num_repeats):
        task: dict[str, Any] = {
            "_ng_rollout_id": base_id if alone else f"{base_id}-r{repeat}",
            "_ng_task_index": task_index,
            "_ng_rollout_index": repeat,
            "task_id": task_id,
            "task_input": with_seed(task_input, repeat) if options.nemo_gym.seed else task_input,
        }
        if type(duration) in (int, float):
            task[EXPECTED_DURATION_KEY] = duration
        copies.append(task)
    return copies


def given_task_index(position: int, row: dict[str, Any]) -> int | None:
    """The task index a row was given (``_ng_task_index`` without ``_ng_rollout_index``), else None."""
    if ROLLOUT_INDEX_KEY in row or TASK_INDEX_KEY not in row:
        return None
    index = row[TASK_INDEX_KEY]
    if type(index) is not int or index < 0:
        raise ConfigError(f"row {position}: {TASK_INDEX_KEY}={index!r} must be an integer >= 0; fix or drop")
    return index


def task_copy(position: int, row: dict[str, Any]) -> int:
    """The copy number submit stamped on a row with a given task index (0 when none; module doc)."""
    copy = row.get(TASK_COPY_KEY, 0)
    if type(copy) is not int or copy < 0:
        raise ConfigError(f"row {position}: {TASK_COPY_KEY}={copy!r} must be an integer >= 0; fix or drop")
    return copy


def repeated_row_indices(position: int, row: dict[str, Any]) -> tuple[int, int] | None:
    """(task index, rollout index) of a row NeMo Gym already repeated, else None (module docstring)."""
    task_index, rollout_index = row.get(TASK_INDEX_KEY), row.get(ROLLOUT_INDEX_KEY)
    if task_index is None and rollout_index is None:
        return None
    if not all(type(value) is int and value >= 0 for value in (task_index, rollout_index)):
        raise ConfigError(
            f"row {position}: {TASK_INDEX_KEY}={task_index!r} and {ROLLOUT_INDEX_KEY}={rollout_index!r} must "
            "both be integers >= 0 (a NeMo Gym materialized row carries both); fix or drop them"
        )
    assert type(task_index) is int and type(rollout_index) is int
    return task_index, rollout_index


def _repeated_copy(
    position: int, row: dict[str, Any], indices: tuple[int, int], options: MaterializeOptions
) -> dict[str, Any]:
    if options.num_repeats != 1:
        raise ConfigError(
            f"row {position} is already a repeated rollout ({TASK_INDEX_KEY}={indices[0]}, "
            f"{ROLLOUT_INDEX_KEY}={indices[1]}: a NeMo Gym materialized file); it is not repeated again. "
            f"Set +num_repeats=1, or use the original dataset with +num_repeats={options.num_repeats}"
        )
    task_id, task_input = _task_of(indices[0], row, options)
    if options.prompt_template is not None:
        task_input = _apply_template(options.prompt_template, options.prompt_field, task_input, position)
    explicit = row.get(ROLLOUT_ID_KEY)
    if explicit is not None and not isinstance(explicit, str):
        raise InvalidRolloutIdError(f"_ng_rollout_id {explicit!r} must be a string")
    task: dict[str, Any] = {
        ROLLOUT_ID_KEY: explicit or f"{indices[0]}-{indices[1]}",
        TASK_INDEX_KEY: indices[0],
        ROLLOUT_INDEX_KEY: indices[1],
        "task_id": task_id,
        "task_input": task_input,
    }
    duration = row.get(EXPECTED_DURATION_KEY)
    if type(duration) in (int, float):
        task[EXPECTED_DURATION_KEY] = duration
    return task


def _task_of(
    position: int, row: dict[str, Any], options: MaterializeOptions
) -> tuple[dict[str, str], dict[str, Any]]:
    """The task id and input of a row; ``position`` is its task index (a plain row's default id)."""
    native_id = row.get("task_id")
    if isinstance(native_id, dict) and "task_input" in row:
        taskset, task_id = native_id.get("taskset"), native_id.get("task_id")
        if not (type(taskset) is str and taskset and type(task_id) is str and task_id):
            raise ConfigError(
                f"row {position}: task_id must be {{'taskset': str, 'task_id': str}}, both non-empty; "
                f"got {native_id!r}"
            )
        if type(row["task_input"]) is not dict:
            raise ConfigError(f"row {position}: task_input must be a JSON object")
        refuse_for_task(position, options.nemo_gym)
        return {"taskset": taskset, "task_id": task_id}, row["task_input"]
    own_id = native_id if type(native_id) in (str, int) else position
    task_input = {k: v for k, v in row.items() if not k.startswith("_ng_") and k != TASK_COPY_KEY}
    if options.nemo_gym:
        task_input = prepare_row(position, task_input, options.nemo_gym)
    taskset = options.dataset_name if options.agents is None else _agent_of(position, row, options.agents)
    return {"taskset": taskset, "task_id": str(own_id)}, task_input


def _agent_of(position: int, row: dict[str, Any], agents: frozenset[str]) -> str:
    """A flat row's agent under NeMo Gym's default routing (its taskset): refused by name when none."""
    agent_ref = row.get("agent_ref")
    name = agent_ref.get("name") if isinstance(agent_ref, dict) else None
    if isinstance(name, str) and name in agents:
        return name
    known = ", ".join(sorted(agents)) or "none"
    said = f"agent_ref {name!r}, which no single Environment Server fronts" if name else "no agent_ref"
    raise ConfigError(
        f"row {position} has {said} (agents with one server in the NeMo Gym configuration: {known}). With no "
        "server named, each row goes to its agent_ref's Environment Server, as NeMo Gym's default routing; "
        "name one for every row with +environment_routing_mode=legacy +environment_server_name=NAME (or "
        "+agent_name=AGENT), or +environment_server_url=http://HOST:PORT"
    )


def _apply_template(template: str, field: str, task_input: dict[str, Any], position: int) -> dict[str, Any]:
    try:
        rendered = template.format_map(task_input)
    except KeyError as error:
        raise ConfigError(
            f"row {position}: prompt_template uses {{{error.args[0]}}}, which its task_input does not have "
            f"(keys: {', '.join(sorted(task_input))}); fix the template or the dataset"
        ) from None
    except (IndexError, ValueError, AttributeError) as error:
        raise ConfigError(f"prompt_template {template!r} is not a valid format string: {error}") from None
    return {**task_input, field: rendered}


def _base_rollout_id(row: dict[str, Any], task_id: dict[str, str]) -> str:
    explicit = row.get(ROLLOUT_ID_KEY)
    if explicit is not None:
        if not isinstance(explicit, str):
            raise InvalidRolloutIdError(f"_ng_rollout_id {explicit!r} must be a string")
        return explicit
    return _UNSAFE_ID_CHARS.sub("_", f"{task_id['taskset']}-{task_id['task_id']}")


def check_rollout_ids(tasks: list[dict[str, Any]]) -> None:
    """Raise InvalidRolloutIdError for the first invalid or repeated rollout id."""
    ids = [task["_ng_rollout_id"] for task in tasks]
    valid = ROLLOUT_ID_PATTERN.fullmatch
    if len(set(ids)) == len(ids) and all(
        type(rollout_id) is str and valid(rollout_id) and "-a" not in rollout_id for rollout_id in ids
    ):
        return  # the common case, checked in one pass; the slow pass below names the culprit
    seen: dict[str, int] = {}
    for index, task in enumerate(tasks):
        rollout_id = task["_ng_rollout_id"]
        _refuse_id(index, task)
        if rollout_id in seen:
            raise _repeated(rollout_id, tasks[seen[rollout_id]], task)
        seen[rollout_id] = index


def _refuse_id(index: int, task: dict[str, Any]) -> None:
    """Raise InvalidRolloutIdError when rollout ``index``'s id is not a valid rollout id."""
    rollout_id = task["_ng_rollout_id"]
    problem = rollout_id_problem(rollout_id)
    if problem:
        raise InvalidRolloutIdError(
            f"rollout {index} (dataset row {task['_ng_task_index']}): "
            f"rollout id {rollout_id!r} {problem}. "
            "Fix _ng_rollout_id (or the task_id/taskset it is built from) in the dataset"
        )


def _repeated(rollout_id: str, first: dict[str, Any], second: dict[str, Any]) -> InvalidRolloutIdError:
    return InvalidRolloutIdError(
        f"rollout id {rollout_id!r} is used by dataset rows {first['_ng_task_index']} "
        f"and {second['_ng_task_index']}: rollout ids must be unique; give one row another "
        "_ng_rollout_id or task_id"
    )


def inputs_digest(tasks: list[dict[str, Any]]) -> str:
    """The ``inputs_digest`` these tasks would have as ``<stem>_materialized_inputs.jsonl`` (docs/formats.md).

    SHA-256 of the canonical lines (orjson, sorted keys, one ``\\n`` each): a resume compares the
    current materialization with the saved run by digest, without reading the saved file.
    """
    sha = hashlib.sha256()
    option = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    for task in tasks:
        sha.update(orjson.dumps(task, option=option))
    return "sha256:" + sha.hexdigest()
