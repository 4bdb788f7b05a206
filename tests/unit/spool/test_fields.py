"""The one set of field checks: what a body reader accepts, spawn and arithmetic can take.

Each reproduction of issue 23's "one hand-placed file" is a body that
parses as JSON but holds a value no submit would write; the reader must
refuse it as CorruptFile with a one-line reason, and anything it accepts
must pass the request builder's checks (what exec() and the expiry
arithmetic need).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from taskq.client.request import accepted
from taskq.errors import BadInput, CorruptFile
from taskq.spool import fields
from taskq.spool.task import TaskBody

# A fixed id: the bodies below name the tests, and every xdist worker must
# collect the same names.
GOOD = json.loads(
    TaskBody(
        id="01M8SNPDKJBW15Y4JK0JXG8ATB",
        argv=["true"],
        run_at=0,
        submitted_at=0,
        env={"PATH": "/bin"},
    ).to_json()
)

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # no lone surrogates: not UTF-8


def body_with(**changes: Any) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (body_with(argv=["echo", "a\0b"]), "NUL"),
        (body_with(cwd="/tmp\0x"), "NUL"),
        (body_with(env={"A": "x\0y"}), "NUL"),
        (body_with(env={"A=B": "1"}), "names are"),
        (body_with(env={"": "1"}), "names are"),
        (body_with(env={"1A": "1"}), "names are"),
        (body_with(expires=9e307), "century"),
        (body_with(timeout=1e-300 * 0), "above 0"),
        (body_with(expires=-1), "above 0"),
        (body_with(argv=["\ud800"]), "UTF-8"),
        (body_with(cwd="relative"), "absolute"),
        (body_with(max_attempts=10**6), "max_attempts"),
        (body_with(max_attempts=True), "max_attempts"),
        (body_with(run_at="9999-12-31T23:59:59.999999Z"), None),  # the last instant: fine
        (body_with(run_at="10000-01-01T00:00:00Z"), "run_at"),
        (body_with(after=["0" * 26] * 101), "after"),
        (body_with(umask=18), "umask"),
        (body_with(stdin="!!"), "base64"),
        (body_with(env_recorded="yes"), "env_recorded"),
        (json.dumps(GOOD)[:-1].encode() + b', "x": ' + deep(5000).encode() + b"}", "deep"),
        (f'{{"argv": {deep(5000)}}}'.encode(), "deep"),
        (json.dumps(GOOD).replace('"max_attempts": 3', '"max_attempts": NaN').encode(), "NaN"),
        (json.dumps(GOOD).replace('"timeout": null', '"timeout": Infinity').encode(), "Infinity"),
        (json.dumps(GOOD).replace('"timeout": null', '"timeout": 1e400').encode(), "century"),
        (b"\xff\xfe", "JSON"),
        (b"[]", "object"),
    ],
)
def test_values_later_code_refuses_are_corrupt(data: bytes, reason: str | None) -> None:
    if reason is None:
        TaskBody.from_json(data)
        return
    with pytest.raises(CorruptFile, match=reason) as e:
        TaskBody.from_json(data)
    assert "\n" not in str(e.value)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["\0", "a=b", "/", "\ud800", "9999-12-31T23:59:59Z", "0777"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@given(st.sampled_from(sorted(GOOD)), JSON)
@example("expires", 2.808434952134892e-194)  # a loaded CI run's: above 0 s, yet 0 µs
@example("timeout", 4e-7)
def test_whatever_the_reader_accepts_a_request_would(key: str, value: object) -> None:
    try:
        data = json.dumps({**GOOD, key: value}, allow_nan=True).encode()
        body = TaskBody.from_json(data)
    except CorruptFile:
        return
    accepted(body)  # exec() and the body's limits take it: BadInput would fail the test
    for us in (body.timeout, body.expires):
        assert us is None or 0 < us <= fields.MAX_SECONDS * 1_000_000


def test_seconds_are_finite_and_within_a_century() -> None:
    assert fields.seconds("t", 1.5) == 1_500_000
    assert fields.seconds("t", 0, allow_zero=True) == 0
    for bad in (math.inf, math.nan, -1, 0, 1e12, True, "5", None):
        with pytest.raises(BadInput):
            fields.seconds("t", bad)


def test_environment_names_the_first_bad_variable() -> None:
    assert fields.environment({"A": "1", "B_2": ""}) == ({"A": "1", "B_2": ""}, 9)  # A=1\0B_2=\0
    with pytest.raises(BadInput, match="variable B contains a NUL byte"):
        fields.environment({"A": "1", "B": "\0"})
    with pytest.raises(BadInput, match="'A=B'"):
        fields.environment({"A=B": "1"})


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True),
        st.text(st.characters(blacklist_characters="\0", blacklist_categories=SURROGATES)),
    )
)
def test_the_fast_checks_measure_as_the_slow_ones(env: dict[str, str]) -> None:
    slow = sum(len(f"{k}={v}".encode()) + 1 for k, v in env.items())
    assert fields.environment(env)[1] == slow
    argv = [*env.values(), "x"]
    assert fields.command(argv)[1] == sum(len(a.encode()) + 1 for a in argv)


NAMES = st.text(st.sampled_from("aZ_09=-. é١\0"), max_size=6) | st.from_regex(r"[A-Za-z_]\w*")


@given(st.lists(NAMES, max_size=4))
def test_a_variable_name_is_what_the_pattern_says(names: list[str]) -> None:
    """env_name and a whole env's names are [A-Za-z_][A-Za-z0-9_]*: no other script, no '='."""
    pattern = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    for name in names:
        assert fields.env_name(name) == (pattern.fullmatch(name) is not None)
    env = dict.fromkeys(names, "v")
    named = all(pattern.fullmatch(name) for name in env)
    try:
        fields.environment(env)
    except BadInput as e:
        assert not named and "names are" in str(e)
    else:
        assert named
