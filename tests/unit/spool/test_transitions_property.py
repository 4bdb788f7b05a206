"""The state machine under random interleavings of two actors (hypothesis).

Each actor observes the spool, then later acts on what it saw, which may be
stale by then: exactly the races between two daemons, or a daemon and a
cancel. Every transition is a rename of an exact name, so whatever the
interleaving: the task exists exactly once, at most one actor really holds
it, an attempt starts at most once, a cancelled task never starts, and end
states are final.
"""

from __future__ import annotations

import collections
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from taskq.client.submit import submit
from taskq.spool import byid, transitions, walk
from taskq.spool.layout import Located, Spool
from taskq.spool.states import END_STATES, State
from taskq.spool.task import ClaimName, TaskBody, new_id
from taskq.spool.transitions import DaemonId

ACTORS = ("a", "b")
actor = st.sampled_from(ACTORS)


class TwoActors(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="taskq-prop-")
        self.spool = Spool(str(Path(self.dir) / "spool"))
        self.spool.init()
        self.id = submit(
            self.spool, TaskBody(id=new_id(1), argv=["true"], run_at=1_000_000, submitted_at=0)
        )[0].id
        self.daemons = {x: DaemonId(x, 100 + i) for i, x in enumerate(ACTORS)}
        self.seen: dict[str, Located | None] = dict.fromkeys(ACTORS)
        self.holds: dict[str, ClaimName | None] = dict.fromkeys(ACTORS)
        self.starts: collections.Counter[int] = collections.Counter()
        self.cancelled = False
        self.ended: str | None = None
        self.clock = 2_000_000

    def teardown(self) -> None:
        shutil.rmtree(self.dir)

    def where(self) -> Located:
        return byid.locate(self.spool, self.id)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    @rule(x=actor)
    def observe(self, x: str) -> None:
        self.seen[x] = self.where()

    @precondition(
        lambda self: any(s is not None and s.state == "pending" for s in self.seen.values())
    )
    @rule(x=actor)
    def claim(self, x: str) -> None:
        seen = self.seen[x]
        if seen is None or seen.state != "pending" or self.holds[x] is not None:
            return
        try:
            self.holds[x] = transitions.claim(
                self.spool, seen.path, seen.name, self.daemons[x], self.tick()
            )
        except FileNotFoundError:
            pass

    @rule(x=actor)
    def start(self, x: str) -> None:
        held = self.holds[x]
        if held is None or held.phase != "claimed":
            return
        try:
            self.holds[x] = transitions.start(self.spool, held)
        except FileNotFoundError:
            self.holds[x] = None
            return
        assert not self.cancelled, "a cancelled task started"
        self.starts[held.task.attempt] += 1

    @rule(x=actor)
    def renew(self, x: str) -> None:
        held = self.holds[x]
        if held is None:
            return
        try:
            self.holds[x] = transitions.renew(self.spool, held, self.tick())
        except FileNotFoundError:
            self.holds[x] = None  # the lease was lost: a daemon kills its child here

    @rule(x=actor)
    def take_over(self, x: str) -> None:
        seen = self.seen[x]
        if seen is None or seen.claim is None or seen.claim.host == x:
            return
        try:
            self.holds[x] = transitions.take_over(
                self.spool, seen.claim, self.daemons[x], self.tick()
            )
        except FileNotFoundError:
            pass

    @rule(x=actor)
    def release(self, x: str) -> None:
        held = self.holds[x]
        if held is None or held.phase != "claimed":
            return
        self.holds[x] = None
        try:
            transitions.release(self.spool, held)
        except FileNotFoundError:
            pass

    @rule(x=actor, ok=st.booleans())
    def finish_or_retry(self, x: str, ok: bool) -> None:
        held = self.holds[x]
        if held is None or held.phase != "started":
            return
        self.holds[x] = None
        try:
            if ok or held.task.attempt >= 3:
                state = State.DONE if ok else State.FAILED
                transitions.finish(self.spool, held, state, self.tick())
                assert self.ended is None
                self.ended = state
            else:
                transitions.retry_later(self.spool, held, self.tick())
        except FileNotFoundError:
            pass

    @rule(x=actor)
    def cancel(self, x: str) -> None:
        seen = self.seen[x]
        if seen is None or seen.state not in ("pending", "claimed"):
            return
        try:
            transitions.cancel(self.spool, seen)
        except FileNotFoundError:
            return
        assert self.ended is None
        self.cancelled = True
        self.ended = "cancelled"

    @invariant()
    def exactly_one_file(self) -> None:
        found = [f for f in walk.tasks(self.spool) if f.name.id == self.id]
        assert len(found) == 1, found

    @invariant()
    def at_most_one_real_holder(self) -> None:
        here = self.where()
        real = [x for x, held in self.holds.items() if held is not None and here.claim == held]
        assert len(real) <= 1

    @invariant()
    def attempts_start_once(self) -> None:
        assert all(n == 1 for n in self.starts.values()), self.starts

    @invariant()
    def end_states_are_final(self) -> None:
        if self.ended is not None:
            assert self.where().state == self.ended
            assert self.where().state in END_STATES


TwoActors.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_two_actors = pytest.mark.slow(TwoActors.TestCase)
