"""Materialization: rows → logical rollouts with ids, repeats, limit and prompt templates."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gymslurm.errors import ConfigError, InvalidRolloutIdError
from gymslurm.tasks import (
    MaterializeOptions,
    identical_rows,
    iter_tasks,
    materialize,
    parse_rows,
    source_digest,
    stamp_task_indices,
)

OPTS = MaterializeOptions(dataset_name="math")


def ids(rows: list[dict[str, Any]], **options: Any) -> list[str]:
    opts = MaterializeOptions(dataset_name="math", **options)
    return [task["_ng_rollout_id"] for task in materialize(rows, opts)]


def test_plain_rows_get_ids_from_position_and_dataset() -> None:
    """A plain row's id is <dataset>-<position>; the row (minus _ng_ keys) is its task_input."""
    tasks = materialize([{"q": "1+1"}, {"q": "2+2", "_ng_other": 1}], OPTS)
    assert tasks[1] == {
        "_ng_rollout_id": "math-1",
        "_ng_task_index": 1,
        "_ng_rollout_index": 0,
        "task_id": {"taskset": "math", "task_id": "1"},
        "task_input": {"q": "2+2"},
    }


def test_native_rows_keep_their_task_id_and_input() -> None:
    """A native row's task_id and task_input are sent as they are."""
    row = {"task_id": {"taskset": "code", "task_id": "t/7"}, "task_input": {"x": 1}}
    (task,) = materialize([row], OPTS)
    assert task["task_id"] == {"taskset": "code", "task_id": "t/7"} and task["task_input"] == {"x": 1}
    assert task["_ng_rollout_id"] == "code-t_7"


def test_plain_row_with_scalar_task_id_uses_it() -> None:
    """A plain row with a string task_id is identified by it, not by its position."""
    assert ids([{"task_id": "abc", "q": 1}]) == ["math-abc"]


@pytest.mark.parametrize(
    ("rows", "repeats", "expected"),
    [
        ([{"q": 1}, {"q": 2}], 2, ["math-0-r0", "math-0-r1", "math-1-r0", "math-1-r1"]),
        ([{"_ng_rollout_id": "mine"}], 1, ["mine"]),
        ([{"_ng_rollout_id": "mine"}], 3, ["mine-r0", "mine-r1", "mine-r2"]),
        ([{"q": 1}], 1, ["math-0"]),
    ],
)
def test_rollout_ids(rows: list[dict[str, Any]], repeats: int, expected: list[str]) -> None:
    """Ids follow docs/formats.md: explicit kept for one copy, -r<k> for repeats, row-major order."""
    assert ids(rows, num_repeats=repeats) == expected


def test_repeats_carry_their_repeat_index() -> None:
    """Each copy records its task index and repeat index."""
    tasks = materialize([{"q": 1}], MaterializeOptions(dataset_name="d", num_repeats=3))
    assert [(t["_ng_task_index"], t["_ng_rollout_index"]) for t in tasks] == [(0, 0), (0, 1), (0, 2)]


def _indices(rows: list[dict[str, Any]], **options: Any) -> list[tuple[int, int, str]]:
    tasks = materialize(rows, MaterializeOptions(dataset_name="math", **options))
    return [(t["_ng_task_index"], t["_ng_rollout_index"], t["_ng_rollout_id"]) for t in tasks]


@pytest.mark.parametrize(
    ("rows", "repeats", "expected"),
    [
        ([{"q": 1}] * 3, 1, [(0, 0, "math-0"), (0, 1, "math-0-r1"), (0, 2, "math-0-r2")]),
        ([{"q": 1}, {"q": 1}, {"q": 2}], 1, [(0, 0, "math-0"), (0, 1, "math-0-r1"), (1, 0, "math-1")]),
        (
            [{"q": 1}, {"q": 2}, {"q": 1}],
            2,
            [
                *[(0, 0, "math-0-r0"), (0, 1, "math-0-r1"), (1, 0, "math-1-r0"), (1, 1, "math-1-r1")],
                *[(0, 2, "math-0-r2"), (0, 3, "math-0-r3")],
            ],
        ),
        ([{"_ng_rollout_id": "x"}] * 2, 1, [(0, 0, "x"), (0, 1, "x-r1")]),
        ([{"task_id": "t", "q": 1}] * 2, 1, [(0, 0, "math-t"), (0, 1, "math-t-r1")]),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], 1, [(0, 0, "math-0"), (1, 0, "math-1")]),
    ],
)
def test_identical_rows_are_one_task_repeated(
    rows: list[dict[str, Any]], repeats: int, expected: list[tuple[int, int, str]]
) -> None:
    """Identical rows are one task (NeMo Gym's row_to_task_idx): task indices number distinct rows in
    order of first appearance, rollout indices go on per task, ids get -r<rollout index>; keys in
    another order make another row, as in NeMo Gym's raw-line comparison."""
    assert _indices(rows, num_repeats=repeats) == expected


def test_an_identical_row_past_the_limit_does_not_count() -> None:
    """limit cuts before rows are compared: a copy past it neither repeats the task nor suffixes its id."""
    assert _indices([{"q": 1}, {"q": 2}, {"q": 1}], limit=2) == [(0, 0, "math-0"), (1, 0, "math-1")]


def test_the_streamed_materialization_equals_the_list() -> None:
    """iter_tasks over identical_rows' findings (the collector's streamed path) makes materialize's tasks."""
    rows = [{"q": n % 3} for n in range(10)] + [{"q": 7}]
    opts = MaterializeOptions(dataset_name="math", num_repeats=2)
    assert list(iter_tasks(iter(rows), opts, identical_rows(iter(rows), opts))) == materialize(rows, opts)


def test_limit_keeps_the_first_rows() -> None:
    """limit keeps the first N dataset rows (before repeats)."""
    assert ids([{"q": i} for i in range(5)], limit=2, num_repeats=2) == [
        "math-0-r0",
        "math-0-r1",
        "math-1-r0",
        "math-1-r1",
    ]


def test_unsafe_characters_are_replaced() -> None:
    """Characters outside [A-Za-z0-9._-] in a generated id become '_'."""
    assert ids([{"task_id": "a b/c:d"}]) == ["math-a_b_c_d"]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"_ng_rollout_id": "bad id"}], "must match"),
        ([{"_ng_rollout_id": "run-a3"}], "-a<N>"),
        ([{"_ng_rollout_id": "x", "q": 1}, {"_ng_rollout_id": "x", "q": 2}], "must be unique"),
        ([{"_ng_rollout_id": 5}], "must be a string"),
        ([{"_ng_rollout_id": ""}], "non-empty"),
        ([{"task_id": "b1", "q": 1}, {"task_id": "b1", "q": 2}], "must be unique"),
        ([{"task_id": "a1"}], "-a<N>"),
    ],
)
def test_invalid_or_colliding_ids_are_refused(rows: list[dict[str, Any]], message: str) -> None:
    """Invalid, reserved or colliding rollout ids raise InvalidRolloutIdError."""
    with pytest.raises(InvalidRolloutIdError, match=message):
        materialize(rows, OPTS)


def test_explicit_id_colliding_with_a_generated_one_is_refused() -> None:
    """An explicit id equal to another row's generated id is refused."""
    with pytest.raises(InvalidRolloutIdError, match="unique"):
        materialize([{"q": 1}, {"_ng_rollout_id": "math-0"}], OPTS)


def test_prompt_template_renders_into_the_field() -> None:
    """A prompt template is rendered from task_input into prompt_field."""
    opts = MaterializeOptions(dataset_name="m", prompt_template="Q: {q}?", prompt_field="prompt")
    (task,) = materialize([{"q": "1+1"}], opts)
    assert task["task_input"] == {"q": "1+1", "prompt": "Q: 1+1?"}


def test_changed_prompt_changes_the_tasks() -> None:
    """A changed prompt template changes the materialized tasks (and hence the identity)."""
    first = materialize([{"q": 1}], MaterializeOptions("m", prompt_template="A {q}"))
    second = materialize([{"q": 1}], MaterializeOptions("m", prompt_template="B {q}"))
    assert first != second


def test_prompt_template_missing_key_is_a_config_error() -> None:
    """A template field the row lacks is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="question"):
        materialize([{"q": 1}], MaterializeOptions("m", prompt_template="{question}"))


def test_input_rows_are_not_modified() -> None:
    """Materialization never changes the caller's rows."""
    row = {"q": 1, "_ng_rollout_id": "r"}
    materialize([row], MaterializeOptions("m", num_repeats=2, prompt_template="{q}"))
    assert row == {"q": 1, "_ng_rollout_id": "r"}


def test_expected_duration_is_copied() -> None:
    """_ng_expected_duration_s is copied from the row for longest-first dispatch."""
    (task,) = materialize([{"q": 1, "_ng_expected_duration_s": 12.5}], OPTS)
    assert task["_ng_expected_duration_s"] == 12.5 and "_ng_expected_duration_s" not in task["task_input"]


def test_native_row_with_bad_task_id_is_a_config_error() -> None:
    """A native row whose task_id lacks a field is a ConfigError."""
    with pytest.raises(ConfigError, match="task_id must be"):
        materialize([{"task_id": {"taskset": "x"}, "task_input": {}}], OPTS)


def test_parse_rows_reads_jsonl_and_limit() -> None:
    """parse_rows reads objects, skips blank lines and stops at limit."""
    assert parse_rows(b'{"a":1}\n\n{"a":2}\n{"a":3}\n', "d.jsonl", limit=2) == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    ("data", "message"), [(b'{"a":1}\n{oops\n', "d.jsonl:2"), (b"[1]\n", "not an object")]
)
def test_parse_rows_names_the_bad_line(data: bytes, message: str) -> None:
    """A malformed dataset line is a ConfigError naming file and line."""
    with pytest.raises(ConfigError, match=message):
        parse_rows(data, "d.jsonl")


def test_source_digest_is_sha256_of_bytes() -> None:
    """The source digest is sha256:<hex> of the bytes."""
    assert source_digest(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


# --- repeated rows: NeMo Gym's materialized file of a num_repeats > 1 run -----------------------------

NG_REPEATED = [
    {
        "task_id": {"taskset": "weather", "task_id": "w0"},
        "task_input": {"q": "sf"},
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
    },
    {
        "task_id": {"taskset": "weather", "task_id": "w0"},
        "task_input": {"q": "sf"},
        "_ng_task_index": 0,
        "_ng_rollout_index": 1,
    },
    {"q": "nyc", "_ng_task_index": 1, "_ng_rollout_index": 0},
    {"q": "nyc", "_ng_task_index": 1, "_ng_rollout_index": 1},
]


def test_repeated_rows_are_accepted_with_nemo_gyms_ids() -> None:
    """Rows carrying _ng_task_index/_ng_rollout_index keep them, with NeMo Gym's ids <task>-<rollout>."""
    tasks = materialize(NG_REPEATED, OPTS)
    assert [task["_ng_rollout_id"] for task in tasks] == ["0-0", "0-1", "1-0", "1-1"]
    pairs = [(task["_ng_task_index"], task["_ng_rollout_index"]) for task in tasks]
    assert pairs == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_repeated_plain_rows_share_the_task_id_of_their_task_index() -> None:
    """The copies of one plain task get one task id (its task index), not one per line."""
    tasks = materialize(NG_REPEATED, OPTS)
    assert tasks[2]["task_id"] == tasks[3]["task_id"] == {"taskset": "math", "task_id": "1"}
    assert tasks[2]["task_input"] == {"q": "nyc"}


def test_repeated_rows_keep_an_explicit_rollout_id() -> None:
    """An explicit _ng_rollout_id on a repeated row wins over the index-derived id, as in NeMo Gym."""
    row = {"q": 1, "_ng_task_index": 0, "_ng_rollout_index": 3, "_ng_rollout_id": "mine-3"}
    assert ids([row]) == ["mine-3"]


def test_repeated_rows_are_not_repeated_again() -> None:
    """num_repeats > 1 over already-repeated rows is refused, naming the way out."""
    with pytest.raises(ConfigError, match=r"not repeated again.*num_repeats=1"):
        materialize(NG_REPEATED, MaterializeOptions(dataset_name="math", num_repeats=2))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"q": 1, "_ng_rollout_index": 0}, "must both be integers"),
        ({"q": 1, "_ng_task_index": -1, "_ng_rollout_index": 0}, "must both be integers"),
        ({"q": 1, "_ng_task_index": "0", "_ng_rollout_index": 0}, "must both be integers"),
        ({"q": 1, "_ng_task_index": "3"}, "must be an integer >= 0"),
        ({"q": 1, "_ng_task_index": -2}, "must be an integer >= 0"),
    ],
)
def test_half_or_bad_repeat_indices_are_refused(row: dict[str, Any], message: str) -> None:
    """A rollout index alone, or a non-integer or negative index, is refused before anything is written."""
    with pytest.raises(ConfigError, match=message):
        materialize([row], OPTS)


@pytest.mark.parametrize(
    ("rows", "repeats", "expected"),
    [
        ([{"q": 1, "_ng_task_index": 7}], 1, [(7, 0, "math-7")]),
        (
            [{"q": 1, "_ng_task_index": 7}, {"q": 2, "_ng_task_index": 7}],
            1,
            [(7, 0, "math-7"), (7, 1, "math-7-r1")],
        ),
        (
            [{"q": 1, "_ng_task_index": 5}, {"q": 2}],
            2,
            [(5, 0, "math-5-r0"), (5, 1, "math-5-r1"), (0, 0, "math-0-r0"), (0, 1, "math-0-r1")],
        ),
        ([{"task_id": "t", "_ng_task_index": 3}], 1, [(3, 0, "math-t")]),
    ],
)
def test_a_given_task_index_is_kept_and_its_rows_are_its_rollouts(
    rows: list[dict[str, Any]], repeats: int, expected: list[tuple[int, int, str]]
) -> None:
    """_ng_task_index alone is the task (NeMo Gym keeps an upstream slicer's): rows sharing it are its
    rollouts in turn; it takes no number from the rows without one; a plain row's id is built from it."""
    assert _indices(rows, num_repeats=repeats) == expected


REPEATED_LINE = b'{"_ng_task_index":0,"_ng_rollout_index":1}\n'


def _stamped(*pairs: tuple[bytes, int | None] | tuple[bytes, int, int]) -> list[bytes]:
    """The expected lines: each line with `, "_ng_task_index": N}` in place of its end (None: unchanged),
    and `, "_gymslurm_task_copy": K` before it when a third number is given."""
    out = []
    for line, n, *copy in pairs:
        end = b', "_gymslurm_task_copy": %d' % copy[0] if copy else b""
        out.append(line if n is None else line.rstrip()[:-1] + b', "_ng_task_index": %d%s}\n' % (n, end))
    return out


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([b'{"q": 1}\n', b'{"q":2}\n'], _stamped((b'{"q": 1}\n', 0), (b'{"q":2}\n', 1))),
        (
            [b'{"q":1}\n', b'{"q":2}\n', b'{"q":1}\n'],
            _stamped((b'{"q":1}\n', 0), (b'{"q":2}\n', 1), (b'{"q":1}\n', 0, 1)),
        ),
        ([b"{}\n"], [b'{"_ng_task_index": 0}\n']),
        (
            [b'{"q":1,"_ng_task_index":9}\n', b'{"q":3}\n'],
            _stamped((b'{"q":1,"_ng_task_index":9}\n', None), (b'{"q":3}\n', 0)),
        ),
        ([REPEATED_LINE], [REPEATED_LINE]),
        (
            [b"not json\n", b"[1]\n", b'{"q":1} \n'],
            _stamped((b"not json\n", None), (b"[1]\n", None), (b'{"q":1}\n', 0)),
        ),
    ],
)
def test_submit_stamps_each_row_with_its_dataset_wide_task_index(
    lines: list[bytes], expected: list[bytes]
) -> None:
    """Each object line gains its task index (identical rows share one; a later copy its copy number
    too), its other bytes kept; a line with an index, or not an object, is left for the collector."""
    assert stamp_task_indices(lines) == expected


@pytest.mark.parametrize("repeats", [1, 2])
def test_stamped_shards_materialize_to_the_whole_datasets_tasks(repeats: int) -> None:
    """A stamped dataset cut anywhere materializes to the tasks the whole file has: the same indices,
    ids and inputs; copies of a row in different shards no longer both take rollout 0 (they did)."""
    lines = [orjson.dumps({"q": n % 4}) + b"\n" for n in range(9)]
    opts = MaterializeOptions(dataset_name="d", num_repeats=repeats)
    whole = materialize(parse_rows(b"".join(lines), "d"), opts)
    stamped = stamp_task_indices(lines)
    for at in range(1, len(lines)):
        cut = [materialize(parse_rows(b"".join(part), "d"), opts) for part in (stamped[:at], stamped[at:])]
        assert [t for part in cut for t in part] == whole, at


def test_a_bad_copy_number_is_refused_naming_the_row() -> None:
    """``_gymslurm_task_copy`` must be an integer >= 0, like the indices."""
    with pytest.raises(ConfigError, match="row 0: _gymslurm_task_copy=-1"):
        materialize([{"q": 1, "_ng_task_index": 0, "_gymslurm_task_copy": -1}], OPTS)
