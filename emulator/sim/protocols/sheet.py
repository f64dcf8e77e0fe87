"""The process engine's outcome sheet (docs/engine.md, "Outcomes"): one row per client's
work (a round's participants, one async job, one client's background work), filled as its
pieces end in virtual time, and written to the round log by `outcome.record_outcomes`, the
function the vector engine records through too.

A piece writes only when it ends (its event processed): an end not yet reached stays inf,
so a sheet recorded at any instant (the round's close, the job's end, the end of the run)
records exactly the pieces that ended by then. A stop writes when and why; the protocol's
`on_stop` still runs at once (a round's `Gate` counts a client gone offline the moment it
goes). Plain lists, converted once per record: a participant's cost is a few list writes.
"""
from __future__ import annotations

import math

import numpy as np

from .outcome import Outcomes, record_outcomes

INF = math.inf


class Sheet:
    """Outcome rows of clients' work recorded into `log` (`messages`: the model's
    ((parameters, bytes) down, (parameters, bytes) up); `drop`: a stopped client is recorded
    as dropped, False for work that was no participation). Until it is closed it sits in
    `still_open` (its protocol's: what the end of the run records)."""

    __slots__ = ("log", "messages", "drop", "ids", "t0", "steps", "dur", "floor", "down", "compute", "up",
                 "stop_at", "reason", "carries", "still_open")

    def __init__(self, log, messages, still_open: dict, drop: bool = True):
        self.log, self.messages, self.drop = log, messages, drop
        self.ids, self.t0, self.steps, self.dur, self.floor = [], [], [], [], []
        self.down, self.compute, self.up, self.stop_at, self.reason, self.carries = [], [], [], [], [], []
        self.still_open = still_open
        still_open[self] = None           # (a dict: recorded in the order they were opened)

    def add(self, client: int) -> int:
        """A new row for `client`'s work; returns its index."""
        self.ids.append(client)
        for col in (self.t0, self.down, self.compute, self.up, self.stop_at):
            col.append(INF)
        self.steps.append(0)
        self.dur.append(0.0)
        self.floor.append(0.0)
        self.reason.append("")
        self.carries.append(True)
        return len(self.ids) - 1

    def outcomes(self, now: float) -> Outcomes:
        """The rows as `Outcomes` recorded at `now` (a stopped row at its stop)."""
        stop_at = np.array(self.stop_at)
        stopped = stop_at < INF
        at = np.where(stopped, stop_at, now)
        t0 = np.minimum(np.array(self.t0), at)      # a download never started: no communication
        return Outcomes(np.array(self.ids, dtype=np.int64), t0, np.array(self.steps, dtype=np.int64),
                        np.array(self.dur), np.array(self.floor), np.array(self.down), np.array(self.compute),
                        np.array(self.up), at, stopped, self.reason, np.array(self.carries, dtype=bool))

    def record(self, now: float) -> None:
        """Record the rows as they stand at `now` into the log (again later as work goes on:
        a transfer that ends after the log's metrics row was written adds to that row)."""
        if self.ids:
            record_outcomes(self.log, self.outcomes(now), self.messages, self.drop)
            self.log.follow_bytes()

    def close(self, now: float) -> None:
        """Record the rows for good (the round closed, the job or the work ended)."""
        self.record(now)
        self.still_open.pop(self, None)
