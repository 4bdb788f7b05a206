"""The drop's format: names, ids bound to their member, submissions, requests, claims."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskq.errors import CorruptFile
from taskq.spool import drop, record
from taskq.spool.drop import Claimed, DropName, Request
from taskq.spool.runas import requester
from taskq.spool.task import TaskBody, check_id, decode_id, encode_id, new_id
from taskq.times.timespec import SECOND

uids = st.integers(min_value=0, max_value=2**32 - 2)
NOW = 1_800_000_000 * SECOND


def _body(task_id: str) -> TaskBody:
    return TaskBody(id=task_id, argv=["true"], run_at=NOW, submitted_at=NOW)


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_an_id_encodes_and_decodes(value: int) -> None:
    assert decode_id(encode_id(value)) == value
    assert check_id(encode_id(value)) == encode_id(value)


@given(uids, uids)
def test_a_member_id_is_bound_to_its_member_alone(uid: int, other: int) -> None:
    task_id, nonce = drop.member_id(uid, NOW)
    assert drop.bound_to(task_id, nonce, uid)
    assert drop.bound_to(task_id, nonce, other) == (uid == other)
    assert not drop.bound_to(task_id, "0" * 32, uid)
    assert not drop.bound_to(new_id(NOW), nonce, uid)  # a random id: nobody's nonce fits


def test_one_process_member_ids_increase() -> None:
    made = [drop.member_id(1000, NOW)[0] for _ in range(100)]
    assert made == sorted(made) and len(set(made)) == 100


def test_names_parse_and_nothing_else() -> None:
    task_id = new_id(NOW)
    assert drop.parse_name(f"{task_id}.task") == DropName(task_id, "task")
    assert str(DropName(task_id, "cancel")) == f"{task_id}.cancel"
    for bad in (f"{task_id}.task.part", f".{task_id}.task", f"{task_id}.exec", "x\n.task", ""):
        assert drop.parse_name(bad) is None
    claimed = Claimed(DropName(task_id, "retry"), NOW, 42, "host-1.example")
    assert drop.parse_claim(str(claimed)) == claimed
    assert drop.parse_claim(f"{task_id}.retry_garbage") is None


def test_a_submission_is_a_nonce_then_a_body() -> None:
    task_id, nonce = drop.member_id(1000, NOW)
    data = drop.encode_submission(nonce, _body(task_id))
    name = DropName(task_id, drop.SUBMISSION)
    assert drop.read_submission(data, name) == (nonce, _body(task_id))
    with pytest.raises(CorruptFile, match="no nonce line"):
        drop.read_submission(_body(task_id).to_json(), name)
    other = DropName(new_id(NOW), drop.SUBMISSION)
    with pytest.raises(CorruptFile, match="is not the name's"):
        drop.read_submission(data, other)
    with pytest.raises(CorruptFile, match="bad task body"):
        drop.read_submission(nonce.encode() + b"\n{}", name)


def test_requests_round_trip_and_refuse_what_they_are_not() -> None:
    task_id = new_id(NOW)
    tid = task_id.encode()
    for request in (Request("cancel", task_id), Request("retry", task_id, NOW + 7)):
        assert drop.read_request(request.encode(), request.kind) == request
    for data, kind in (
        (b"[" * 5000, "cancel"),
        (b"not json", "cancel"),
        (b'{"version": 2, "id": "x"}', "cancel"),
        (b'{"version": 1, "id": "../../etc"}', "cancel"),
        (Request("cancel", task_id).encode(), "reschedule"),  # no run_at
        (b'{"version": 1, "id": "%s", "run_at": "1969-12-31T23:59:59.000000Z"}' % tid, "retry"),
        (b'{"version": 1, "id": "%s", "run_at": NaN}' % tid, "reschedule"),
        (b'{"version": 1, "id": "%s\\u0000"}' % tid, "cancel"),
    ):
        with pytest.raises(CorruptFile, match="bad request"):
            drop.read_request(data, kind)


def test_a_recorded_submitter_counts_in_roots_files_alone() -> None:
    body = _body(new_id(NOW))
    mine = record.replace(body, submitter=1000)
    assert requester(body, 1000) == 1000 and requester(body, 0) == 0
    assert requester(mine, 0) == 1000 and requester(mine, 1000) == 1000
    with pytest.raises(CorruptFile, match="records submitter uid 1000 but is owned by uid 1001"):
        requester(mine, 1001)
    assert TaskBody.from_json(mine.to_json()) == mine
    for bad in (b"-1", b"true", b'"1000"', b"4294967295"):
        data = mine.to_json().replace(b'"submitter": 1000', b'"submitter": ' + bad)
        with pytest.raises(CorruptFile, match="submitter must be a uid"):
            TaskBody.from_json(data)
