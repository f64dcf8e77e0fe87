"""Every use of SimPy's private API, in one place (simpy is pinned in pyproject.toml; the
tests in tests/test_participant_driver.py and tests/test_engine_simpy.py check each piece
against SimPy's own semantics, so a SimPy upgrade that changes them fails there).

- `closing_time`: a timeout at a priority below NORMAL (`env.schedule` with LATE, an event
  made triggered by setting `_ok` / `_value`), so that a round's deadline at T counts every
  upload arriving at T, even those scheduled at T itself.
- `at_instant`: an event at exactly virtual time `when` (pushed on the event queue by hand:
  `now + (when - now)` can miss `when` by an ulp, and no delay reaches some instants from
  `now`, such as 0.35000000000000003 from 0.1, which a process reaches as 0.1 + 0.1 + 0.1 + 0.05).
- `call_now`: a callback at this instant, after what is already due now, as a process
  created here would start (its Initialize event is URGENT).
- `Driver`: a generator resumed from callbacks on the events it yields, as SimPy's
  `Process._resume` resumes a process, without the process's own two events (Initialize,
  termination): a round's participants run this way (about a third of the engine's cost
  per participant).
"""
from __future__ import annotations

from heapq import heappush
from typing import Callable

import simpy
from simpy.events import NORMAL, URGENT

#: SimPy priority below NORMAL (1): processed after every other event at that instant
LATE = 2


def _triggered(env) -> simpy.events.Event:
    """An event already triggered (ok, value None), to be scheduled by hand."""
    ev = simpy.events.Event(env)
    ev._ok, ev._value = True, None
    return ev


def closing_time(env, delay: float) -> simpy.events.Event:
    """A timeout that fires after every other event scheduled for the same instant, even
    those created at that instant: a deadline at T counts every upload arriving at T."""
    ev = _triggered(env)
    env.schedule(ev, LATE, delay)
    return ev


def at_instant(env, when: float) -> simpy.events.Event:
    """A timeout that fires at exactly virtual time `when` (not before now), as a timeout
    scheduled now for that instant would: at NORMAL priority, in the order of scheduling."""
    if not when >= env.now:
        raise ValueError(f"at_instant: {when!r} is before now ({env.now!r})")
    ev = _triggered(env)
    heappush(env._queue, (when, NORMAL, next(env._eid), ev))
    return ev


def call_now(env, fn: Callable[[], None]) -> None:
    """Call `fn()` at this instant, after the events already due now, as a process created
    here would start (from an URGENT event)."""
    ev = _triggered(env)
    ev.callbacks.append(lambda _ev: fn())
    env.schedule(ev, URGENT)


class Driver:
    """Drives one generator of SimPy events without a process; `is_alive` and
    `interrupt(cause)` as a SimPy process has them (a round's close stops the late ones)."""

    __slots__ = ("send", "throw", "resume", "is_alive")

    def __init__(self, gen):
        self.send, self.throw = gen.send, gen.throw
        self.resume = self._resume           # (one bound method, appended to each event it waits on)
        self.is_alive = True

    def start(self) -> None:
        self._resume(None)

    def _resume(self, _event) -> None:
        """Run the generator up to its next wait on an event not yet processed (as SimPy's
        `Process._resume`: one that is already processed, `callbacks is None`, is gone past
        at once)."""
        if self.is_alive:                    # (else stopped meanwhile: the round closed)
            send = self.send
            try:
                ev = send(None)
                while ev.callbacks is None:
                    ev = send(None)
            except StopIteration:
                self.is_alive = False
                return
            ev.callbacks.append(self.resume)

    def interrupt(self, cause) -> None:
        """Stop it now: `simpy.Interrupt(cause)` is raised where it waits, so it records its
        partial work."""
        if not self.is_alive:
            return
        self.is_alive = False
        try:
            self.throw(simpy.Interrupt(cause))
        except StopIteration:
            return
        raise RuntimeError("a driven generator went on waiting after it was interrupted")


def start_all(env, drivers: list) -> None:
    """Start `drivers` in order at this instant, after what is already due now, as
    processes created here would (at their Initialize events)."""
    call_now(env, lambda: [d.start() for d in drivers])
