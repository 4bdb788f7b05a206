"""Names and bodies: round trips, ordering, and rejection of foreign input."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskq.errors import BadInput, CorruptFile
from taskq.spool import record
from taskq.spool.states import Phase
from taskq.spool.task import (
    MAX_ATTEMPT,
    Bodies,
    ClaimName,
    TaskBody,
    TaskName,
    bucket_of,
    bucket_start,
    check_id,
    decode_id,
    decode_ids,
    encode_id,
    layout,
    new_id,
    valid_bucket,
    valid_buckets,
    valid_id,
)
from taskq.times.timespec import MINUTE, SECOND

instants = st.integers(min_value=0, max_value=253402300799 * SECOND)
ids = st.builds(new_id, st.integers(min_value=0, max_value=2**47 * 1000))
attempts = st.integers(min_value=1, max_value=MAX_ATTEMPT)
hosts = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", fullmatch=True)

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # no lone surrogates: not UTF-8


queues = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.-]{0,63}", fullmatch=True)


@given(instants, ids, attempts, queues)
def test_task_name_round_trip(run_at: int, task_id: str, attempt: int, queue: str) -> None:
    name = TaskName(run_at, task_id, attempt, queue)
    assert TaskName.parse(str(name)) == name


@given(
    instants,
    ids,
    attempts,
    queues,
    st.sampled_from(Phase),
    instants,
    st.integers(min_value=1, max_value=2**31),
    hosts,
)
def test_claim_name_round_trip(
    run_at: int,
    task_id: str,
    attempt: int,
    queue: str,
    phase: Phase,
    expiry: int,
    pid: int,
    host: str,
) -> None:
    claim = ClaimName(TaskName(run_at, task_id, attempt, queue), phase, expiry, pid, host)
    assert ClaimName.parse(str(claim)) == claim


@given(instants, instants, ids, ids)
def test_name_order_is_dispatch_order(a: int, b: int, id_a: str, id_b: str) -> None:
    na, nb = TaskName(a, id_a, 1), TaskName(b, id_b, 1)
    assert (str(na) < str(nb)) == ((a, id_a) < (b, id_b))


@given(instants)
def test_bucket_holds_its_instant(us: int) -> None:
    start = bucket_start(bucket_of(us))
    assert start <= us < start + MINUTE


def test_ids_are_ordered_by_time_and_unique() -> None:
    a, b = new_id(1_000_000_000), new_id(1_001_000_000)
    assert a < b
    assert len({new_id(5) for _ in range(1000)}) == 1000
    assert valid_id(a) and check_id(a.lower()) == a


@given(st.integers(min_value=2**80, max_value=2**128 - 1))
def test_an_id_is_its_value_in_crockford_base32(value: int) -> None:
    """new_id's text (two digits at a time) is the value's 26 base-32 digits, high first."""
    from taskq.spool import task

    crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    task._last_id = value - 1  # new_id(0) then takes value itself: its time part is 0
    digits = "".join(crockford[(value >> shift) & 31] for shift in range(125, -1, -5))
    assert new_id(0) == digits


@pytest.mark.parametrize(
    "bad", ["", "../../etc/passwd", "0" * 25, "I" * 26, "0" * 27, "0" * 25 + "/"]
)
def test_bad_ids_are_refused(bad: str) -> None:
    with pytest.raises(BadInput):
        check_id(bad)


@pytest.mark.parametrize(
    "name",
    [
        "x",
        "20261201T090000.000000Z_" + "0" * 26,
        "20261201T090000.000000Z_" + "0" * 26 + "_0",
        "20261201T090000.000000Z_" + "0" * 26 + "_1.tmp",
        "20261201T090000Z_" + "0" * 26 + "_1",
    ],
)
def test_foreign_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        TaskName.parse(name)


exec_text = st.text(
    st.characters(blacklist_characters="\0", blacklist_categories=SURROGATES)
)  # what exec() takes
body_strategy = st.builds(
    TaskBody,
    id=ids,
    argv=st.lists(exec_text.filter(bool), min_size=1, max_size=5),
    run_at=instants,
    submitted_at=instants,
    cwd=exec_text.map(lambda t: "/" + t),
    env=st.dictionaries(st.from_regex(r"[A-Z_]{1,8}", fullmatch=True), exec_text),
    queue=st.from_regex(r"[a-z][a-z0-9.-]{0,10}", fullmatch=True),
    key=st.none() | exec_text,
    max_attempts=st.integers(min_value=1, max_value=100),
    timeout=st.none() | st.integers(min_value=1, max_value=10**12),
    expires=st.none() | st.integers(min_value=1, max_value=10**12),
    stdin=st.none() | st.binary(max_size=256),
    mutex=st.none() | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.-]{0,20}", fullmatch=True),
)


@pytest.mark.slow
@given(body_strategy)
def test_body_round_trip(body: TaskBody) -> None:
    assert TaskBody.from_json(body.to_json()) == body


@given(
    st.dictionaries(
        st.text(),
        st.none()
        | st.booleans()
        | st.integers()
        | st.text()
        | st.lists(st.text())
        | st.dictionaries(st.text(), st.text()),
    )
)
@pytest.mark.slow
def test_layout_is_indent_ones_to_the_byte(doc: dict[str, object]) -> None:
    """The C-encoded layout is byte for byte what json.dumps(indent=1) wrote before it."""
    assert layout(doc) == (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode()


@pytest.mark.slow
@given(body_strategy)
def test_a_bodys_file_is_its_indent_one_json(body: TaskBody) -> None:
    data = body.to_json()
    assert data == (json.dumps(json.loads(data), indent=1, ensure_ascii=False) + "\n").encode()
    assert body.to_json() is data  # encoded once


SHARED_ENVS: tuple[dict[str, str], ...] = (
    {},
    {"PATH": "/bin"},
    {"PATH": "/usr/bin:/bin", "HOME": "/root", "Q": 'a"\\b\n'},
)
batch_bodies = st.builds(  # cheap to draw: a loaded machine fails a slow strategy's health check
    TaskBody,
    id=st.just("01M8S9M6EHFXMCZZ8KQDS58W3Y"),
    argv=st.sampled_from([["true"], ["sh", "-c", 'echo "\u00e9"\n']]),
    run_at=instants,
    submitted_at=instants,
    cwd=st.sampled_from(["/", "/tmp", '/d\u00e9j\u00e0 "vu"']),
    env=st.sampled_from(SHARED_ENVS) | st.builds(dict, st.just({"A": "1"})),
    queue=st.sampled_from(["default", "q.1"]),
    key=st.none() | st.sampled_from(["k", "\u2028"]),
    max_attempts=st.sampled_from([1, 3, True]),  # True: laid out as true, not as 1
    timeout=st.none() | st.sampled_from([1, 10**6, 1.5]),
    expires=st.none() | st.sampled_from([10**6]),
    stdin=st.none() | st.just(b"\x00x"),
    umask=st.none() | st.sampled_from([0o022, 0o077]),
    env_recorded=st.booleans(),
    after=st.sampled_from([[], ["0" * 26]]),
    after_any=st.booleans(),
    mail=st.none() | st.sampled_from(["always"]),
    mutex=st.none() | st.sampled_from(["m"]),
    submitter=st.none() | st.sampled_from([0, 1000, False]),
    priority=st.sampled_from([0, 1, -5, True]),
)


@given(st.lists(batch_bodies, min_size=1, max_size=6))
def test_a_bodys_file_is_the_layout_of_its_document(bodies: list[TaskBody]) -> None:
    """Members that bodies share are laid out once (by value, env by identity): the same bytes."""
    for body in bodies:
        assert body.to_json() == layout(body.document())


@given(batch_bodies)
def test_bodies_made_alike_are_the_bodies_of_their_values(body: TaskBody) -> None:
    """A batch's plain lines' bodies (Bodies.make): equal to the body, and its file to the byte."""
    values = {k: v for k, v in body.__dict__.items() if k not in ("_file", "id", "argv")}
    made = Bodies(values).make(body.id, body.argv, body.run_at + 1)
    assert made == record.replace(body, run_at=body.run_at + 1)
    assert made.to_json() == layout(made.document())


def test_a_body_is_made_of_all_its_fields_or_refused() -> None:
    body = TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0, priority=3)
    values = {k: v for k, v in body.__dict__.items() if k != "_file"}
    assert TaskBody.of(values) == body
    with pytest.raises(TypeError, match="priority"):
        TaskBody.of({k: v for k, v in values.items() if k != "priority"})
    with pytest.raises(TypeError, match="colour"):
        TaskBody.of({**values, "colour": "red"})


@given(st.binary(max_size=200))
def test_garbage_bodies_are_corrupt_not_crashes(data: bytes) -> None:
    try:
        TaskBody.from_json(data)
    except CorruptFile:
        pass


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("argv", []),
        ("argv", "ls"),
        ("argv", [1]),
        ("max_attempts", 0),
        ("max_attempts", True),
        ("timeout", -1),
        ("id", "nope"),
        ("queue", "../x"),
        ("run_at", 5),
        ("version", 2),
        ("stdin", "!!!"),
        ("env", {"A": 1}),
        ("umask", "0999"),
        ("umask", 18),
        ("mutex", "a_b"),
        ("mutex", ""),
        ("mutex", 7),
        ("mutex", "x" * 65),
    ],
)
def test_wrong_field_types_are_corrupt(field: str, value: object) -> None:
    doc = json.loads(TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0).to_json())
    doc[field] = value
    with pytest.raises(CorruptFile):
        TaskBody.from_json(json.dumps(doc).encode())


def test_a_mutex_is_written_only_when_given() -> None:
    plain = TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0)
    assert b"mutex" not in plain.to_json()
    held = TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0, mutex="db-migrate")
    assert json.loads(held.to_json())["mutex"] == "db-migrate"
    assert TaskBody.from_json(held.to_json()).mutex == "db-migrate"


def test_ids_of_one_process_only_increase() -> None:
    same_ms = [new_id(1_800_000_000_000_000) for _ in range(1000)]
    assert same_ms == sorted(same_ms) and len(set(same_ms)) == 1000
    assert new_id(5) > same_ms[-1]  # even if the clock goes back


def test_umask_and_recorded_env_round_trip() -> None:
    body = TaskBody(
        id=new_id(0),
        argv=["true"],
        run_at=0,
        submitted_at=0,
        env={"A": "1"},
        umask=0o027,
        env_recorded=True,
    )
    doc = json.loads(body.to_json())
    assert doc["umask"] == "0027" and doc["env_recorded"] is True
    assert TaskBody.from_json(body.to_json()) == body
    for key in ("umask", "env_recorded"):  # bodies written before they were recorded
        del doc[key]
    old = TaskBody.from_json(json.dumps(doc).encode())
    assert old.umask is None and old.env_recorded is False


def test_a_time_without_offset_in_a_body_is_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # the reader's zone must not matter
    doc = json.loads(TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0).to_json())
    doc["run_at"] = "2026-12-01T09:00:00"
    assert TaskBody.from_json(json.dumps(doc).encode()).run_at == 1_796_115_600 * SECOND


names = st.builds(
    TaskName,
    st.integers(0, 2**50),
    st.sampled_from([new_id(0), new_id(1), new_id(2)]),
    st.integers(1, 3),
    st.sampled_from(["default", "a", "b"]),
)


@given(names, names)
def test_names_compare_hash_and_sort_as_their_fields(a: TaskName, b: TaskName) -> None:
    x, y = (a.run_at, a.id, a.attempt, a.queue), (b.run_at, b.id, b.attempt, b.queue)
    assert (a == b, a < b, a <= b, a > b, a >= b) == (x == y, x < y, x <= y, x > y, x >= y)
    assert a != ClaimName(a, Phase.CLAIMED, 0, 1, "h") and (a != b or hash(a) == hash(b))
    assert TaskName.parse(str(a)) == a and pickle.loads(pickle.dumps(a)) == a
    assert eval(repr(a), {"TaskName": TaskName}) == a


def test_names_are_immutable_and_copied_with_changes() -> None:
    name = TaskName(5, new_id(0), 1)
    claim = ClaimName(name, Phase.CLAIMED, 10, 3, "h")
    with pytest.raises(AttributeError):
        name.run_at = 6
    with pytest.raises(AttributeError):
        del claim.phase
    started = claim.with_(phase="started")
    assert (started.phase, started.task, claim.phase) == ("started", name, "claimed")
    assert str(started) == str(claim).replace("_claimed_", "_started_")
    assert ClaimName.parse(str(started)) == started and copy.deepcopy(started) == started


def test_priority_of_reads_the_key_line_as_layout_writes_it() -> None:
    from taskq.spool.task import MAX_PRIORITY, TaskBody, new_id, priority_of

    def body(**kw: object) -> TaskBody:
        return TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0, **kw)  # type: ignore[arg-type]

    assert priority_of(body().to_json()) == 0
    assert priority_of(body(priority=-7).to_json()) == -7
    assert priority_of(body(priority=MAX_PRIORITY).to_json()) == MAX_PRIORITY
    tricky = body(env={"X": '\n "priority": 999'}).to_json()  # escaped inside a string
    assert priority_of(tricky) == 0
    import json

    by_hand = json.dumps(json.loads(body(priority=3).to_json()), indent=4).encode()
    assert priority_of(by_hand) == 3
    assert priority_of(b'{\n "priority": 99999,\n}') == 0


@given(st.lists(st.text(st.sampled_from("0123456789x.\n٣"), max_size=14)))
def test_valid_buckets_keeps_what_valid_bucket_keeps(names: list[str]) -> None:
    names += ["202612011200", "2026120112001", ".202612011200"]
    assert valid_buckets(names) == [n for n in names if valid_bucket(n)]


@given(st.lists(st.integers(min_value=0, max_value=(1 << 128) - 1), max_size=20))
def test_ids_decode_together_as_each_alone(values: list[int]) -> None:
    ids = [encode_id(v) for v in values]
    assert decode_ids(ids) == [decode_id(i) for i in ids] == values
    with pytest.raises(ValueError, match="not a task id"):
        decode_ids([*ids, ids[0][:25] if ids else "x"])
