"""Resource limits in a body: checked as submit's options, a batch line and the reader see them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.client import batch
from taskq.errors import BadInput, CorruptFile
from taskq.spool import fields, resources
from taskq.spool.resources import Resources
from taskq.spool.task import Request, TaskBody, new_id


def body_doc(limits: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0).to_json()
    )
    doc["limits"] = limits
    return doc


def test_a_body_keeps_its_limits_and_a_body_without_none() -> None:
    limits = Resources(memory_max=50 << 20, cpu_weight=50, cpu_max=150, tasks_max=64)
    body = TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0, limits=limits)
    assert TaskBody.from_json(body.to_json()).limits == limits
    plain = TaskBody(id=new_id(0), argv=["true"], run_at=0, submitted_at=0)
    assert b"limits" not in plain.to_json()
    assert TaskBody.from_json(plain.to_json()).limits is None


@pytest.mark.parametrize(
    "limits, reason",
    [
        ({"memory_max": 1000}, "limits.memory_max must be from 1048576"),
        ({"memory_max": True}, "limits.memory_max must be bytes"),
        ({"cpu_weight": 0}, "limits.cpu_weight must be a whole number from 1 to 10000"),
        ({"cpu_max": 1.5}, "limits.cpu_max must be a whole number"),
        ({"tasks_max": -3}, "limits.tasks_max must be a whole number from 1"),
        ({"io_max": 5}, "limits has a limit this daemon does not know: 'io_max'"),
        ([1], "limits must be an object"),
    ],
)
def test_the_reader_refuses_a_bad_or_unknown_limit(limits: Any, reason: str) -> None:
    with pytest.raises(CorruptFile, match=reason):
        TaskBody.from_doc(body_doc(limits))


@pytest.mark.parametrize(
    "given, reason",
    [
        ({"memory_max": "12Q"}, "--memory-max must be bytes"),
        ({"memory_max": "100K"}, "--memory-max must be from 1048576"),
        ({"cpu_weight": 10001}, "--cpu-weight must be a whole number from 1 to 10000"),
        ({"cpu_max": "half"}, "--cpu-max must be a percentage of one CPU"),
        ({"tasks_max": "x"}, "--tasks-max must be a whole number from 1"),
    ],
)
def test_options_are_named_as_options(given: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadInput, match=reason):
        resources.given(given, option=True)


def test_sizes_and_percentages_read_as_typed() -> None:
    assert resources.given({"memory_max": "512M", "cpu_max": "50%"}) == {
        "memory_max": 512 << 20,
        "cpu_max": 50,
    }
    assert fields.size("x", "10GiB") == 10 << 30
    assert resources.size_text(50 << 20) == "50M"
    assert resources.size_text((1 << 20) + 1) == "1048577"


def test_a_batch_line_replaces_the_command_lines_limits_one_by_one() -> None:
    defaults = Request(run_at=0, limits=Resources(memory_max=1 << 30, tasks_max=10))
    lines = [b'{"command": ["true"], "tasks_max": 3}', b'{"command": ["true"]}']
    first, second = batch.parse(lines, defaults, 0)
    assert first.limits == Resources(memory_max=1 << 30, tasks_max=3)
    assert second.limits == defaults.limits


def test_each_limit_needs_its_controller() -> None:
    assert Resources(memory_max=1 << 20).controllers() == {"memory"}
    assert Resources(cpu_weight=5, cpu_max=10).controllers() == {"cpu"}
    assert Resources(tasks_max=5).controllers() == {"pids"}


HOSTILE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["\0", "50M", "1e400", "-1", "0x10"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from([*resources.NAMES, "io_max", ""]), inner, max_size=4)
    ),
    max_leaves=8,
)


@settings(deadline=None)
@given(HOSTILE)
def test_whatever_limits_a_file_holds_the_reader_refuses_or_keeps_in_range(limits: Any) -> None:
    """A hand-written or hostile body's limits: CorruptFile, or values the cgroup files take."""
    data = json.dumps(body_doc(limits), allow_nan=True).encode()
    try:
        kept = TaskBody.from_json(data).limits
    except CorruptFile:
        return
    if kept is None:  # no limits (null or an empty object)
        return
    ranges = (resources.MEMORY_MAX, resources.CPU_WEIGHT, resources.CPU_MAX, resources.TASKS_MAX)
    for name, (low, high) in zip(resources.NAMES, ranges, strict=True):
        value = getattr(kept, name)
        assert value is None or (type(value) is int and low <= value <= high), kept
