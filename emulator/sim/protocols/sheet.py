"""The process engine's outcome sheet (docs/engine.md, "Outcomes"): one row per client's
work (a round's participants, one async job, one client's background work), filled as its
pieces end in virtual time, and written to the round log once, when its facts are final
(`close`), by `outcome.record_outcomes`, the function the vector engine records through too.

A piece writes only when it ends (its event processed): an end not yet reached stays inf,
so a sheet closed at any instant (the round's close, the job's end, the end of the run)
records exactly the pieces that ended by then. A stop writes when and why; the protocol's
`on_stop` still runs at once (a round's `Gate` counts a client gone offline the moment it
goes). Plain lists, converted once, at the close: a participant's cost is a few list writes.

Work still running when its round's metrics row is written (FedUMF's background work) is
not recorded then: the row counts the bytes of its transfers that ended by then, and each
later row of its model those that ended since (`report`); the close hands the recorder
what ended after the last of them (`Recorder.late_bytes`; docs/engine.md, "Bytes").
"""
from __future__ import annotations

import math

import numpy as np

from .outcome import Outcomes, record_outcomes

INF = math.inf


class OpenSheets:
    """A protocol's sheets not yet closed: in the order they were opened (what the end of the
    run records), per log (what a log's metrics row reports), and, per model, those a
    metrics row already reported (the model's next rows count what ends later)."""

    __slots__ = ("order", "by_log", "reported")

    def __init__(self):
        self.order: dict = {}             # sheet -> None (a dict: insertion order)
        self.by_log: dict = {}            # log -> {sheet: None}
        self.reported: dict = {}          # model -> {sheet: None}

    def add(self, sheet) -> None:
        self.order[sheet] = None
        self.by_log.setdefault(sheet.log, {})[sheet] = None

    def remove(self, sheet) -> None:
        if sheet not in self.order:
            return
        del self.order[sheet]
        for index, key in ((self.by_log, sheet.log), (self.reported, sheet.log.task)):
            held = index.get(key)
            if held is not None and sheet in held:
                del held[sheet]
                if not held:
                    del index[key]

    def report(self, log) -> tuple:
        """`log`'s metrics row is written: (up, down) bytes of the transfers that ended of
        its sheets still open, and, as late bytes, of the model's sheets reported before
        (`Sheet.report`); they are reported from now on."""
        up = down = 0
        for sheet in list(self.by_log.get(log, ())):
            u, d = sheet.report()
            up, down = up + u, down + d
            self.reported.setdefault(log.task, {})[sheet] = None
        for sheet in list(self.reported.get(log.task, ())):
            if sheet.log is not log:
                u, d = sheet.report()
                sheet.recorder.late_bytes(sheet.log, u, d)
        return up, down

    def __contains__(self, sheet) -> bool:
        return sheet in self.order

    def __iter__(self):
        return iter(list(self.order))


class Sheet:
    """Outcome rows of clients' work recorded into `log` (`messages`: the model's
    ((parameters, bytes) down, (parameters, bytes) up); `drop`: a stopped client is recorded
    as dropped, False for work that was no participation). Until it is closed it sits in
    `still_open` (its protocol's: what the end of the run records); `recorder` takes the
    bytes that end after the log's metrics row was written."""

    __slots__ = ("log", "messages", "drop", "ids", "t0", "steps", "dur", "floor", "down", "compute", "up",
                 "stop_at", "reason", "carries", "still_open", "recorder", "reported")

    def __init__(self, log, messages, still_open: OpenSheets, recorder, drop: bool = True):
        self.log, self.messages, self.drop, self.recorder = log, messages, drop, recorder
        self.reported = None              # (up, down) bytes metrics rows counted (None: none yet)
        self.ids, self.t0, self.steps, self.dur, self.floor = [], [], [], [], []
        self.down, self.compute, self.up, self.stop_at, self.reason, self.carries = [], [], [], [], [], []
        self.still_open = still_open
        still_open.add(self)

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

    def arrived_bytes(self) -> tuple:
        """(up, down) bytes of the transfers that ended so far: each upload, each download
        that carries its broadcast's bytes (`record_outcomes` counts the same ones)."""
        (_, nb_down), (_, nb_up) = self.messages
        ups = sum(1 for u in self.up if u < INF)
        downs = sum(1 for d, c in zip(self.down, self.carries) if d < INF and c)
        return ups * nb_up, downs * nb_down

    def report(self) -> tuple:
        """A metrics row is written while the work still runs: (up, down) bytes of its
        transfers that ended since the last report (the rest are reported later, or handed
        to the recorder at the close)."""
        up, down = self.arrived_bytes()
        before = self.reported or (0, 0)
        self.reported = (up, down)
        return up - before[0], down - before[1]

    def close(self, now: float) -> None:
        """Record the rows, once: their facts are final (the round closed, the job or the
        work ended, the run ended). Bytes that ended after the last metrics row that reported
        it go to the recorder (`Recorder.late_bytes`: the model's next row counts them)."""
        self.still_open.remove(self)
        if not self.ids:
            return
        record_outcomes(self.log, self.outcomes(now), self.messages, self.drop)
        if self.reported is not None:
            up, down = self.arrived_bytes()
            self.recorder.late_bytes(self.log, up - self.reported[0], down - self.reported[1])
