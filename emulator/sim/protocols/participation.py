"""A round's participant without a SimPy process (DESIGN.md section 3, "Protocol").

`Protocol.participate` is a generator of a participant's round (download, compute, upload,
arrival) that yields the SimPy events it waits for. A protocol whose own process runs it
inline (`async`) drives it with `yield from`. A round's participants (`rounds`,
`multi_model`) are driven here instead, one `Participation` each: the generator is resumed
from a callback on the event it yielded, as a SimPy process would resume it, but without the
process's own two events (Initialize, termination) and its bookkeeping, about a third of the
engine's cost per participant. The same events are scheduled in the same order either way
(tests: identical clients.csv, metrics.csv and events.csv).
"""
from __future__ import annotations

import simpy


class WentOffline(Exception):
    """The client's online period ended while it was working."""


class Participation:
    """Drives one `participate` generator; `is_alive` and `interrupt(cause)` as a SimPy process
    has them (`Protocol.close_round` stops the late ones)."""

    __slots__ = ("send", "throw", "resume", "is_alive")

    def __init__(self, gen):
        self.send, self.throw = gen.send, gen.throw
        self.resume = self._resume           # (one bound method, appended to each event it waits on)
        self.is_alive = True

    def start(self) -> None:
        self._resume(None)

    def _resume(self, _event) -> None:
        """Run the generator up to its next wait on an event not yet processed (as SimPy's
        `Process._resume`: one that is already processed is gone past at once)."""
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
        partial work (`Protocol._stopped`)."""
        if not self.is_alive:
            return
        self.is_alive = False
        try:
            self.throw(simpy.Interrupt(cause))
        except StopIteration:
            return
        raise RuntimeError("a participation went on waiting after it was interrupted")
