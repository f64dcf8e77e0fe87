"""A client's work in pieces (docs/engine.md, "Pieces"): download, compute, upload, each a
piece of a SimPy generator that may be stopped part-way, and `participate`, their usual
composition. A protocol composes them:

    work = self.begin(client, task, round_, log)         # what a stop must record
    yield from self.guard(work, body(), on_stop)          # body: a generator of pieces
      yield from self.download(work, numel)              # broadcast over the client's link
      fut = yield from self.compute(work, spec, steps)   # a TrainJob; virtual compute time
      yield from self.upload(work, numel)                # the update over the link

`participate` is download -> compute -> upload -> arrival written out in one generator (the
engine's cost per participant); a protocol may also train without uploading (FedUMF's
unselected clients) or train a model of its choice (multi-model FL): the pieces take the
task and the spec as arguments. A stop records the partial work once (`_stopped`; the steps
completed: `outcome.steps_done`).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import simpy

from ...compute.jobs import TrainJob
from ..client import State
from ..draws import NO_DRAWS
from ..simpy_internals import start_all
from .outcome import never_ends, steps_done


class WentOffline(Exception):
    """The client's online period ended while it was working."""


class Work:
    """One client's work in one round of one model: which piece it is in and since when (so a
    stop records the partial times), its round's log row, its online watch."""

    __slots__ = ("client", "task", "round", "log", "columns", "index", "phase", "since", "recorded_steps",
                 "step_floor", "compute_s", "transfer", "offline", "buffers", "draws", "_rng", "background")

    def __init__(self, client, task, round_, log, offline, draws=None):
        self.client, self.task, self.round, self.log = client, task, round_, log
        self.draws = NO_DRAWS if draws is None else draws   # the round's bulk draws (sim/draws.py)
        self._rng = None
        self.index = log.at(client.id)      # its row in the log
        self.columns = log.cells()          # the log's columns, cell by cell (recorder.Cells)
        self.phase, self.since = State.SELECTED, 0.0   # the piece it is in, since when
        self.recorded_steps = 0             # what clients.csv `steps` records (SGD steps, or T-SFL's tau)
        self.step_floor = 0.0               # lower bound on one recorded step's compute time
        self.compute_s = 0.0                # seconds its computation takes
        self.transfer = None
        self.offline = offline
        self.buffers = task.buffers         # BatchNorm statistics of the model it downloads
        self.background = False             # work no round waits for: its traffic yields

    def rng(self, streams):
        """This work's own stream (jitter of work outside a round's bulk draw), on first use."""
        if self._rng is None:
            self._rng = streams.keyed("network", self.client.id, self.round)
        return self._rng


class Pieces:
    """The pieces of a client's work, a mixin of `Protocol` (which gives env, world, messages,
    multicast and set_state)."""

    def begin(self, client, task, round_: int, log, draws=None) -> Work:
        return Work(client, task, round_, log, self.offline_watch(client), draws)

    def _send(self, work: Work, nbytes: int, direction: str, seconds: Optional[float] = None):
        """Start a transfer of `nbytes` (taking `seconds` where the round planned it); returns
        the event of its arrival. `_sent` records it once it has arrived."""
        env, w = self.env, self.world
        work.phase = State.DOWNLOADING if direction == "down" else State.UPLOADING
        work.since = env.now
        if w.recorder.events is not None:
            self.set_state(work.client, work.phase, work.round)
        if seconds is not None:          # planned for the round (a dedicated link: `planned_seconds`)
            work.transfer = None         # (a timeout: nothing to cancel)
            return env.timeout(seconds)
        jitter = work.draws.jitter_of(work.client.id, direction)
        rng = work.rng(w.streams) if jitter is None and work.client.link.jitter > 0 else None
        key = self.multicast_key if self.multicast and direction == "down" else None
        work.transfer = w.network.transfer(work.client, nbytes, direction, jitter, rng, work.background, key)
        return work.transfer.event

    def _sent(self, work: Work, numel: int, nbytes: int, direction: str) -> None:
        """Record an arrived transfer of `numel` parameters in `nbytes`: its seconds, bytes and
        message (a multicast broadcast's bytes once per round)."""
        work.transfer = None
        cells, i = work.columns, work.index
        cells.comm_time[i] += self.env.now - work.since
        if direction == "up":
            cells.bytes_up[i] += nbytes
        else:
            if self.multicast:
                if self.multicast_sent:  # one message reached every recipient: counted once
                    return
                self.multicast_sent = True
            cells.bytes_down[i] += nbytes
        work.log.messages.append((numel, nbytes, direction))

    def _move(self, work: Work, numel: int, direction: str, seconds: Optional[float] = None):
        nb = self.world.network.message_bytes(numel, direction)
        ev = self._send(work, nb, direction, seconds)
        yield ev if work.offline is None else ev | work.offline
        if not ev.processed:         # the client went offline first (a Timeout is `triggered` at once)
            raise WentOffline()
        self._sent(work, numel, nb, direction)

    def download(self, work: Work, numel: int, seconds: Optional[float] = None):
        """Piece: the broadcast of `numel` parameters over the client's link (taking
        `seconds` where the round planned it)."""
        yield from self._move(work, numel, "down", seconds)

    def upload(self, work: Work, numel: int, seconds: Optional[float] = None):
        """Piece: an upload of `numel` parameters over the client's link."""
        yield from self._move(work, numel, "up", seconds)

    def submit_job(self, task, client: int, round_: int, steps: int, spec, buffers, rows=None):
        """The TrainJob of `client` in round `round_` (a model with BatchNorm statistics starts from
        `buffers`, those it downloaded, unless the spec says otherwise); returns its future."""
        if task.net.has_buffers and spec.buffers is None:
            spec.buffers = buffers
        return self.world.executor.submit(TrainJob(task.index, client, round_, steps, spec, task.batch_size, rows=rows))

    def compute(self, work: Work, spec, steps: int, duration: Optional[float] = None,
                record_steps: Optional[int] = None, step_floor: Optional[float] = None, rows=None):
        """Piece: submit the TrainJob of `steps` local steps from `spec` and be busy for its
        compute time (one timeout: nothing can change the outcome in between); returns the
        job's future, resolved only when something reads it. `duration` (default: from the
        client's compute model) fixes the time, `record_steps` what clients.csv `steps` says
        (default: the SGD steps), `step_floor` a lower bound on one recorded step's time,
        `rows` a subset of the client's samples to train on."""
        fut, done = self._start_compute(work, spec, steps, duration, record_steps, step_floor, rows)
        yield done if work.offline is None else done | work.offline
        if not done.processed:
            raise WentOffline()
        self._computed(work)
        return fut

    def _start_compute(self, work: Work, spec, steps: int, duration: Optional[float] = None,
                       record_steps: Optional[int] = None, step_floor: Optional[float] = None, rows=None):
        """`compute` up to its wait: returns (the job's future, the event of its end)."""
        env, task, c = self.env, work.task, work.client
        if duration is None:
            clock = c.clock(work.round, env.now, task.index, work.draws.draw(c.id))
            duration = clock.time(steps)
            step_floor = clock.min_step(steps) if steps > 0 else 0.0
        # spec None: the round's cohort holds this client's job (protocols/cohort.py)
        fut = None if spec is None else self.submit_job(task, c.id, work.round, steps, spec, work.buffers, rows)
        work.phase, work.since, work.compute_s = State.COMPUTING, env.now, duration
        work.recorded_steps = steps if record_steps is None else record_steps
        work.step_floor = step_floor or 0.0
        if self.world.recorder.events is not None:
            self.set_state(c, State.COMPUTING, work.round, f"{steps} steps")
        # always an event, even of 0 s (equal-time uploads then keep the order of their causes,
        # as the vector engine orders them: protocols/vector.py); an infinite step time never
        # ends: an event that never fires
        return fut, (env.timeout(duration) if math.isfinite(duration) else never_ends(env))

    def _computed(self, work: Work) -> None:
        cells, i = work.columns, work.index
        cells.steps[i] = work.recorded_steps
        cells.compute_time[i] = work.compute_s
        cells.min_compute[i] = work.recorded_steps * work.step_floor

    def guard(self, work: Work, body, on_stop: Optional[Callable] = None, drop: bool = True):
        """Run `body` (a generator of pieces). Going offline (continuous-time availability)
        or an `Interrupt` (the round closed) stops it: the partial times are recorded, the
        client is recorded as dropped with the reason (unless `drop=False`: work that was no
        participation, such as background training), and `on_stop(client_id, reason)` is
        called. Returns the body's value (None when stopped)."""
        try:
            return (yield from body)
        except (simpy.Interrupt, WentOffline) as stop:
            self._stopped(work, stop, on_stop, drop)
            return None

    def _stopped(self, work: Work, stop, on_stop: Optional[Callable], drop: bool) -> None:
        """What `guard` records when work stops part-way."""
        reason = "offline" if isinstance(stop, WentOffline) else str(stop.cause)
        if work.transfer is not None:
            work.transfer.cancel()
        log, i = work.log, work.index
        elapsed = self.env.now - work.since
        if work.phase == State.COMPUTING:
            done = steps_done(work.recorded_steps, elapsed, work.compute_s)
            log.compute_time[i] = elapsed
            log.steps[i] = done
            log.min_compute[i] = done * work.step_floor
        elif work.phase in (State.DOWNLOADING, State.UPLOADING):
            log.comm_time[i] += elapsed
        if drop:
            log.drop(work.client.id, reason)
        self.set_state(work.client, State.OFFLINE if reason == "offline" else State.DROPPED, work.round, reason)
        if on_stop is not None:
            on_stop(work.client.id, reason)

    def participate(self, client, task, round_: int, bc, steps: int, log, on_arrival: Callable,
                    on_fail: Optional[Callable] = None, after=None, draws=None, cohort: bool = False, seconds=None):
        """The usual round of a participant, a generator of the events it waits for: download
        the broadcast, compute `steps` local steps, upload; `on_arrival(client_id, upload,
        steps)` when the upload lands, `on_fail(client_id)` when the client went offline.
        `after`: an event to wait for first (the client's own unfinished background job, FedUMF
        `wait`). `cohort`: the round's cohort holds its job (protocols/cohort.py): the client
        counts it when it starts computing and uploads None. `seconds`: its (download, compute,
        step floor, upload) seconds, planned for the round (`planned_seconds`). Run inline by the
        caller's process (`yield from`, `async`), or without a process (`Driver`: a round's
        participants). `round_` keys the work's draws and batches: the round (under `async`,
        the client's job key)."""
        work = self.begin(client, task, round_, log, draws)
        algo = task.algorithm
        down, dur, floor, up_s = (None, None, None, None) if seconds is None else seconds
        off = work.offline
        # the pieces (download, compute, upload under `guard`) written out in one generator:
        # a SimPy resume then passes one frame, not five (the engine's cost per participant)
        try:
            if after is not None:
                yield after
            (numel, nb), (numel_up, nb_up) = self.messages(task)
            ev = self._send(work, nb, "down", down)
            yield ev if off is None else ev | off
            if not ev.processed:             # the online period ended first
                raise WentOffline()
            self._sent(work, numel, nb, "down")
            if cohort:
                self.world.executor.count_jobs(1, steps)
                fut, ev = self._start_compute(work, None, steps, dur, step_floor=floor)
            else:
                fut, ev = self._start_compute(work, algo.local_spec(client.id, round_, bc), steps, dur, step_floor=floor)
            yield ev if off is None else ev | off
            if not ev.processed:             # the online period ended first
                raise WentOffline()
            self._computed(work)
            up = None if cohort else algo.upload(client.id, round_, fut)
            ev = self._send(work, nb_up, "up", up_s)
            yield ev if off is None else ev | off
            if not ev.processed:             # the online period ended first
                raise WentOffline()
            self._sent(work, numel_up, nb_up, "up")
            self.set_state(client, State.DONE, round_)
            on_arrival(client.id, up, steps)
        except (simpy.Interrupt, WentOffline) as stop:
            self._stopped(work, stop, self.on_offline(on_fail), True)

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
