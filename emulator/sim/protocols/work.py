"""A client's work in pieces (docs/engine.md, "A client's work"): download, compute, upload.
Each piece starts (`send`, `start_compute`: the event of its end), is waited for (`until`:
that event or the end of the client's online period, whichever comes first) and ends
(`sent`, `computed`: `reached` raises `WentOffline` when the client went offline first, the
one place that check is made); a stop (`STOPS`: an interrupt, going offline) is written by
`stopped`. A protocol composes the pieces as generators:

    sheet = self.open_sheet(log, task)                    # where the outcomes go (sheet.py)
    work = self.begin(client, task, round_, sheet)        # its row there
    yield from self.guard(work, body(), on_stop)          # body: a generator of pieces
      yield from self.download(work)                     # the broadcast over the client's link
      fut = yield from self.compute(work, spec, steps)   # a TrainJob; virtual compute time
      yield from self.upload(work)                       # the update over the link
    sheet.close(self.env.now)                             # into the round log (record_outcomes)

`participate` is guard(download -> compute -> upload) -> arrival in one generator: the same
pieces' start, wait and end, without a generator per piece (the engine's cost per
participant), its round's common part in one `Call`. Each piece writes when it ends (a
stop: when and why) into the work's row of the sheet; the protocol closes the sheet when the
row's facts are final, and only `outcome.record_outcomes` writes the round log, for both
engines. A protocol may also train without uploading (FedUMF's unselected clients) or train
a model of its choice (multi-model FL): the pieces take the task and the spec as arguments.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import simpy

from ...compute.jobs import TrainJob
from ..client import State
from ..draws import NO_DRAWS
from ..simpy_internals import start_all
from .outcome import never_ends
from .sheet import Sheet


class WentOffline(Exception):
    """The client's online period ended while it was working."""


#: what stops a client's work part-way: the round closed (or its job was abandoned), or
#: the client went offline
STOPS = (simpy.Interrupt, WentOffline)


def until(work, ev):
    """What a piece of `work` waits on: `ev` (the piece's end) or the end of the client's
    online period, whichever comes first (`reached` tells which)."""
    off = work.offline
    return ev if off is None else ev | off


def reached(ev) -> None:
    """After a piece's wait (`until`): its event came first, else the client went offline
    first (`WentOffline`). (A Timeout is `triggered` as soon as it is made: `processed` says
    it fired.)"""
    if not ev.processed:
        raise WentOffline()


class Work:
    """One client's work in one round of one model: its row in the outcome sheet (`sheet`,
    `row`), the piece it is in (`phase`), its transfer in flight, its online watch, the
    BatchNorm statistics it downloads, the round's draws."""

    __slots__ = ("client", "task", "round", "sheet", "row", "phase", "transfer", "offline", "buffers", "draws",
                 "_rng", "background")

    def __init__(self, client, task, round_, sheet: Sheet, offline, draws=None):
        self.client, self.task, self.round, self.sheet = client, task, round_, sheet
        self.row = sheet.add(client.id)
        self.draws = NO_DRAWS if draws is None else draws   # the round's bulk draws (sim/draws.py)
        self._rng = None
        self.phase = State.SELECTED         # the piece it is in
        self.transfer = None
        self.offline = offline
        self.buffers = task.buffers         # BatchNorm statistics of the model it downloads
        self.background = False             # work no round waits for: its traffic yields

    def rng(self, streams):
        """This work's own stream (jitter of work outside a round's bulk draw), on first use."""
        if self._rng is None:
            self._rng = streams.keyed("network", self.client.id, self.round)
        return self._rng


@dataclass(slots=True)
class Call:
    """What a round of one model (or one async job) gives its participants: the model's
    `task`, the `round` (keys draws and batches; under `async` the client's job key), the
    broadcast `bc`, the outcome `sheet`, the round's `draws`; `arrive(client, upload, steps)`
    when an upload lands, `fail(client)` when a client went offline (a `Gate`'s, or None);
    `cohort`: the round's cohort holds the jobs (protocols/cohort.py)."""

    task: object
    round: int
    bc: object
    sheet: Sheet
    draws: object
    arrive: Callable
    fail: Optional[Callable] = None
    cohort: bool = False


class Pieces:
    """The pieces of a client's work, a mixin of `Protocol` (which gives env, world, messages,
    multicast and set_state)."""

    def open_sheet(self, log, task, drop: bool = True) -> Sheet:
        """An outcome sheet for work on model `task` recorded into `log` (open until closed;
        the end of the run records what is still open: `record_open`)."""
        return Sheet(log, self.messages(task), self.open_sheets, self.world.recorder, drop)

    def record_open(self) -> None:
        """The run ended: record every sheet still open as it stands (a round that never
        closed, work the run's end cut short)."""
        for sheet in self.open_sheets:
            sheet.close(self.env.now)

    def begin(self, client, task, round_: int, sheet: Sheet, draws=None) -> Work:
        return Work(client, task, round_, sheet, self.offline_watch(client), draws)

    # -- the pieces: each starts (returns the event of its end), is waited for (`until`), ends
    def send(self, work: Work, direction: str, seconds: Optional[float] = None):
        """Start a transfer of the work's `direction` message (taking `seconds` where the round
        planned it); returns the event of its arrival (`sent` ends it)."""
        env, w = self.env, self.world
        if direction == "down":
            work.phase = State.DOWNLOADING
            work.sheet.t0[work.row] = env.now
        else:
            work.phase = State.UPLOADING
        if w.recorder.events is not None:
            self.set_state(work.client, work.phase, work.round)
        if seconds is not None:          # planned for the round (a dedicated link: `planned_seconds`)
            work.transfer = None         # (a timeout: nothing to cancel)
            return env.timeout(seconds)
        nbytes = work.sheet.messages[direction == "up"][1]
        jitter = work.draws.jitter_of(work.client.id, direction)
        rng = work.rng(w.streams) if jitter is None and work.client.link.jitter > 0 else None
        key = (work.task.index, work.round) if self.multicast and direction == "down" else None
        work.transfer = w.network.transfer(work.client, nbytes, direction, jitter, rng, work.background, key)
        return work.transfer.event

    def sent(self, work: Work, direction: str, ev) -> None:
        """The wait for transfer `ev` is over: it arrived (its end is written; a multicast
        broadcast's bytes are carried by the first download of its round's broadcast to
        arrive, background work's included, whatever round is in progress when it arrives:
        the broadcast is named by its model and round), or the client went offline first."""
        reached(ev)
        work.transfer = None
        sheet, i = work.sheet, work.row
        if direction == "up":
            sheet.up[i] = self.env.now
            return
        sheet.down[i] = self.env.now
        if self.multicast:
            key = (work.task.index, work.round)
            sheet.carries[i] = key not in self.multicast_counted
            self.multicast_counted.add(key)

    def start_compute(self, work: Work, spec, steps: int, duration: Optional[float] = None,
                      record_steps: Optional[int] = None, step_floor: Optional[float] = None, rows=None):
        """Submit the TrainJob of `steps` local steps from `spec` (None: the round's cohort
        holds it, protocols/cohort.py) and start its compute time; returns (the job's future,
        the event of the computation's end; `computed` ends it). `duration` (default: from
        the client's compute model) fixes the time, `record_steps` what clients.csv `steps`
        says (default: the SGD steps), `step_floor` a lower bound on one recorded step's
        time, `rows` a subset of the client's samples to train on."""
        env, task, c = self.env, work.task, work.client
        if duration is None:
            clock = c.clock(work.round, env.now, task.index, work.draws.draw(c.id))
            duration = clock.time(steps)
            step_floor = clock.min_step(steps) if steps > 0 else 0.0
        fut = None if spec is None else self.submit_job(task, c.id, work.round, steps, spec, work.buffers, rows)
        work.phase = State.COMPUTING
        sheet, i = work.sheet, work.row
        sheet.dur[i] = duration
        sheet.steps[i] = steps if record_steps is None else record_steps
        sheet.floor[i] = step_floor or 0.0
        if self.world.recorder.events is not None:
            self.set_state(c, State.COMPUTING, work.round, f"{steps} steps")
        # always an event, even of 0 s (equal-time uploads then keep the order of their causes,
        # as the vector engine orders them: protocols/vector.py); an infinite step time never
        # ends: an event that never fires
        return fut, (env.timeout(duration) if math.isfinite(duration) else never_ends(env))

    def computed(self, work: Work, ev) -> None:
        """The wait for computation `ev` is over: it ended, or the client went offline first."""
        reached(ev)
        work.sheet.compute[work.row] = self.env.now

    def stopped(self, work: Work, stop, on_stop: Optional[Callable]) -> None:
        """Work stopped part-way (`stop`: one of `STOPS`): when and why, in its row (its
        sheet records the partial times, and the client as dropped unless the sheet was
        opened with `drop=False`); the transfer in flight is cancelled; then
        `on_stop(client_id, reason)`."""
        reason = "offline" if isinstance(stop, WentOffline) else str(stop.cause)
        if work.transfer is not None:
            work.transfer.cancel()
        sheet, i = work.sheet, work.row
        sheet.stop_at[i] = self.env.now
        sheet.reason[i] = reason
        self.set_state(work.client, State.OFFLINE if reason == "offline" else State.DROPPED, work.round, reason)
        if on_stop is not None:
            on_stop(work.client.id, reason)

    def submit_job(self, task, client: int, round_: int, steps: int, spec, buffers, rows=None):
        """The TrainJob of `client` in round `round_` (a model with BatchNorm statistics starts from
        `buffers`, those it downloaded, unless the spec says otherwise); returns its future."""
        if task.net.has_buffers and spec.buffers is None:
            spec.buffers = buffers
        return self.world.executor.submit(TrainJob(task.index, client, round_, steps, spec, task.batch_size, rows=rows))

    # -- the pieces as generators, to compose: start, wait, end ------------------------------
    def download(self, work: Work, seconds: Optional[float] = None):
        """Piece: the broadcast of the model over the client's link (taking `seconds` where
        the round planned it)."""
        ev = self.send(work, "down", seconds)
        yield until(work, ev)
        self.sent(work, "down", ev)

    def upload(self, work: Work, seconds: Optional[float] = None):
        """Piece: an upload of the client's update over its link."""
        ev = self.send(work, "up", seconds)
        yield until(work, ev)
        self.sent(work, "up", ev)

    def compute(self, work: Work, spec, steps: int, duration: Optional[float] = None,
                record_steps: Optional[int] = None, step_floor: Optional[float] = None, rows=None):
        """Piece: the client is busy for the compute time of its TrainJob (`start_compute`:
        one timeout, nothing can change the outcome in between); returns the job's future,
        resolved only when something reads it. It starts when the download ended (the
        outcome's rule: outcome.py)."""
        fut, ev = self.start_compute(work, spec, steps, duration, record_steps, step_floor, rows)
        yield until(work, ev)
        self.computed(work, ev)
        return fut

    def guard(self, work: Work, body, on_stop: Optional[Callable] = None):
        """Run `body` (a generator of pieces). Going offline (continuous-time availability)
        or an `Interrupt` (the round closed) stops it (`stopped`), and `on_stop(client_id,
        reason)` is called at once. Returns the body's value (None when stopped)."""
        try:
            return (yield from body)
        except STOPS as stop:
            self.stopped(work, stop, on_stop)
            return None

    def participate(self, call: Call, client, steps: int, seconds=None, after=None):
        """The usual round of a participant, a generator of the events it waits for: download
        `call.bc`, compute `steps` local steps, upload; `call.arrive(client_id, upload, steps)`
        when the upload lands, `call.fail(client_id)` when the client went offline.
        `seconds`: its (download, compute, step floor, upload) seconds, planned for the round
        (`planned_seconds`). `after`: an event to wait for first (the client's own unfinished
        background job, FedUMF `wait`). Under `call.cohort` the client counts its job when it
        starts computing and uploads None. Run inline by the caller's process (`yield from`,
        `async`), or without a process (`Driver`: a round's participants).

        `guard(download, compute, upload)` in one generator: the same pieces (each piece's
        start, `until`, end), without a generator per piece (a SimPy resume then passes one
        frame, not five: the engine's cost per participant)."""
        task, round_ = call.task, call.round
        work = self.begin(client, task, round_, call.sheet, call.draws)
        down, dur, floor, up_s = (None, None, None, None) if seconds is None else seconds
        try:
            if after is not None:
                yield after
            ev = self.send(work, "down", down)
            yield until(work, ev)
            self.sent(work, "down", ev)
            if call.cohort:
                self.world.executor.count_jobs(1, steps)
                spec = None
            else:
                spec = task.checked.local_spec(client.id, round_, call.bc)
            fut, ev = self.start_compute(work, spec, steps, dur, step_floor=floor)
            yield until(work, ev)
            self.computed(work, ev)
            up = None if call.cohort else task.checked.upload(client.id, round_, fut)
            ev = self.send(work, "up", up_s)
            yield until(work, ev)
            self.sent(work, "up", ev)
            self.set_state(client, State.DONE, round_)
            call.arrive(client.id, up, steps)
        except STOPS as stop:
            self.stopped(work, stop, self.on_offline(call.fail))

    def start_participants(self, parts: list) -> None:
        """Start a round's participants (`Driver`s: `participate` without a process each) in
        order at this instant, as processes created here would (sim/simpy_internals.py)."""
        start_all(self.env, parts)

    @staticmethod
    def on_offline(on_fail: Optional[Callable]):
        """A guard's `on_stop` that calls `on_fail(client_id)` only when the client went offline."""
        def stopped(cid, reason):
            if reason == "offline" and on_fail is not None:
                on_fail(cid)
        return stopped
