"""What every protocol shares: the small steps a client's work is composed of (download,
compute, upload, each a piece of a SimPy process that may be stopped part-way), the
aggregation step (resolve the uploads' lazy values, call the algorithm, record its result),
evaluation and the metrics row.

A protocol composes the pieces (DESIGN.md section 3, "Protocol"):

    work = self.begin(client, task, t, log)              # what a stop must record
    yield from self.guard(work, body(), on_stop)          # body: a generator of pieces
      yield from self.download(work, numel)              # broadcast over the client's link
      fut = yield from self.compute(work, spec, steps)   # a TrainJob; virtual compute time
      yield from self.upload(work, numel)                # the update over the link

`participate` is the usual composition (download -> compute -> upload -> arrival); a
protocol may also train without uploading (FedUMF's unselected clients) or train a model
of its choice (multi-model FL): the pieces take the task and the spec as arguments.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import simpy
import torch
from pydantic import Field, model_validator

from ... import registry
from ...registry import Params

from ...algorithms.base import Arrival, BackgroundTraining, Rows
from ...compute.jobs import TrainJob
from ...compute.lazy import Lazy, force, resolve
from ...errors import DivergedError, InvariantError
from ..client import State
from ..draws import NO_DRAWS, RoundDraws
from .cohort import Cohort
from ..simpy_internals import closing_time, start_all  # noqa: F401 (closing_time: protocols import it here)
from .round_plan import round_times


class WentOffline(Exception):
    """The client's online period ended while it was working."""


class Gate:
    """Counts a round's outcomes and fires `done` once `need` uploads arrived or every
    participant arrived or failed (DESIGN: wait on a counter and one event, not AllOf)."""

    def __init__(self, env, participants: int, need: Optional[int] = None):
        self.env = env
        self.n = participants
        self.need = participants if need is None else min(need, participants)
        self.arrived: list = []
        self.failed = 0
        self.done = env.event()
        self.closed = False
        if self.n == 0:
            self.done.succeed()

    def _check(self):
        if not self.done.triggered and (len(self.arrived) >= self.need or len(self.arrived) + self.failed >= self.n):
            self.done.succeed()

    def arrive(self, client: int, upload, steps: int) -> bool:
        """Record an arrival (a participant's `on_arrival`); False if the round had already closed."""
        if self.closed:
            return False
        self.arrived.append((client, upload, steps))
        self._check()
        return True

    def fail(self, client: Optional[int] = None) -> None:
        """A participant went offline (its `on_fail`)."""
        self.failed += 1
        self._check()


def default_select():
    """`select` when a scenario gives none: every available client."""
    from ...scenario import member
    return member("selection", "all")


class LocalWorkParams(Params):
    """Fixed local work per round: `local_steps`, or `local_epochs` passes over the client's data."""
    local_steps: Optional[int] = Field(None, ge=0, description="local SGD steps per round")
    local_epochs: Optional[float] = Field(None, gt=0, description="or local epochs (steps = ceil(epochs * n_i / B))")

    @model_validator(mode="after")
    def _work(self):
        if (self.local_steps is None) == (self.local_epochs is None):
            raise ValueError("give exactly one of local_steps or local_epochs")
        return self


class Work:
    """One client's work in one round of one model: which piece it is in and since when (so a
    stop records the partial times), its round's log row, its online watch."""

    __slots__ = ("client", "task", "t", "log", "cells", "row", "phase", "t0", "unit", "unit_floor",
                 "dur", "transfer", "offline", "buffers", "draws", "_rng")

    def __init__(self, client, task, t, log, offline, draws=None):
        self.client, self.task, self.t, self.log = client, task, t, log
        self.draws = NO_DRAWS if draws is None else draws   # the round's bulk draws (sim/draws.py)
        self._rng = None
        self.row = log.at(client.id)
        self.cells = log.cells()            # its columns, cell by cell (recorder.Cells)
        self.phase, self.t0 = State.SELECTED, 0.0
        self.unit = 0                       # what clients.csv `steps` records (SGD steps, or T-SFL's tau)
        self.unit_floor = 0.0               # lower bound on one recorded step's compute time
        self.dur = 0.0
        self.transfer = None
        self.offline = offline
        self.buffers = task.buffers         # BatchNorm statistics of the model it downloads

    def rng(self, streams):
        """This work's own stream (jitter of work outside a round's bulk draw), on first use."""
        if self._rng is None:
            self._rng = streams.keyed("network", self.client.id, self.t)
        return self._rng


class Protocol:
    name = "?"
    #: trains several models at once (`workloads:`); single-model protocols refuse them
    multi_model = False
    #: records one clients.csv row per client job (JOB logs, sim/recorder.py), not per round
    records_per_job = False

    def __init__(self, world, params):
        self.world = world
        self.p = params
        self.env = world.env
        self.multicast_sent = False     # this round's multicast broadcast has been counted
        self.multicast = False          # a protocol with `broadcast: multicast` sets it
        self._messages = {}             # model -> its messages' (parameters, bytes), down and up
        self.selector = None            # a protocol with `select` sets it (`make_selector`)

    @staticmethod
    def make_selector(spec):
        """The server-side selection a protocol's `select` block names."""
        return registry.get("selection", spec.model).factory(spec)

    def available(self, t: int) -> np.ndarray:
        """Ids of the clients online now (per-round models asked for round t), per device group."""
        now = self.env.now
        out = [members[model.online_mask(members, t, now)] for members, model in self.world.group_members]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def process(self):
        raise NotImplementedError

    def summary(self) -> dict:
        """Protocol-specific figures for summary.json (default none)."""
        return {}

    def models_due(self) -> set:
        """The models this run must have aggregated (a post-run invariant): every model once a
        round ran; a protocol that assigns clients to models says which it gave clients to."""
        return {t.index for t in self.world.tasks} if self.world.rounds_done > 0 else set()

    # -- helpers ----------------------------------------------------------------------
    def set_state(self, client, state: State, round_: int, detail: str = "") -> None:
        """A recorded state transition (events.csv, with `output.events: true`)."""
        rec = self.world.recorder
        if rec.events is not None:
            rec.event(self.env.now, client.id, state.value, round_, detail)

    def local_steps(self, client_id: int, task) -> int:
        """Fixed local work per round: local_steps, or local_epochs x ceil(n_i / B)."""
        p = self.p                      # LocalWorkParams
        if p.local_steps is not None:
            return int(p.local_steps)
        from ...compute.batches import steps_per_epoch
        spe = steps_per_epoch(int(task.client_sizes[client_id]), task.batch_size)
        return max(1, int(math.ceil(p.local_epochs * spe - 1e-9)))

    def steps_of(self, clients, task) -> np.ndarray:
        """`local_steps` of many clients (one array; fixed local_steps costs no loop)."""
        if self.p.local_steps is not None:
            return np.full(len(clients), int(self.p.local_steps), dtype=np.int64)
        return np.array([self.local_steps(int(c), task) for c in clients], dtype=np.int64)

    def wait_for_someone(self):
        """Nobody is online for the next round: advance to the earliest time a client whose
        availability runs in continuous time comes online (one timeout). Returns True when time
        moved; False when waiting cannot help (per-round models decide per round, whatever the
        time: the round runs, perhaps empty); None when no client will ever be online again (the
        run stalls)."""
        now = self.env.now
        timed = [c for c in self.world.clients if c.availability.kind == "time"]
        nxt = min((c.availability.next_online(c.id, now) for c in timed), default=math.inf)
        if now < nxt < math.inf:
            yield self.env.timeout(nxt - now)
            return True
        if math.isinf(nxt) and len(timed) == len(self.world.clients):
            self.world.stall("no client will ever be online again")
            return None
        return False

    def close_round(self, gate, procs):
        """Generator: the round closes now. Participants still working are interrupted ('late')
        and record their partial work first (one 0 s timeout); returns the arrived items
        [(client, upload, steps)] in arrival order."""
        gate.closed = True
        late = [p for p in procs if p.is_alive]
        for p in late:
            p.interrupt("late")
        if late:
            yield self.env.timeout(0)
        return list(gate.arrived)

    def run_rounds(self, each):
        """Generator: rounds 1, 2, ... until the run stops, waiting before each for a client to be
        online (`ready_for`); `each(t)` is a generator running round t, returning True to end.
        Returns None when no client will ever be online again (the run stalled), else True."""
        t = 0
        while not self.world.should_stop():
            ready = yield from self.ready_for(t + 1)
            if ready is None:
                return None
            if not ready:
                continue
            t += 1
            if (yield from each(t)):
                break
        return True

    def ready_for(self, t: int):
        """Generator, before round t of a round-based protocol: True to run it; False when
        nobody was online and time moved to when someone comes (check again); None when nobody
        will ever be online again (the run stalls)."""
        if self.world.time_availability and not len(self.available(t)):
            moved = yield from self.wait_for_someone()
            return None if moved is None else not moved
        return True

    def offline_watch(self, client):
        """An event that fires when the client's current online period ends (None: never
        before it finishes, for per-round availability models)."""
        if client.availability.kind == "round":     # decided at the round's start, held for it
            return None
        until = client.availability.online_until(client.id, self.env.now)
        if math.isinf(until):
            return None
        return self.env.timeout(max(0.0, until - self.env.now))

    def message_numel(self, task, direction: str) -> int:
        """Parameters of one message: what the algorithm declares, plus the BatchNorm
        statistics of models that have them (they travel with the model, as in FedAvg)."""
        return self.messages(task)[direction == "up"][0]

    def messages(self, task) -> tuple:
        """((parameters, bytes) of a download, (parameters, bytes) of an upload) of this model.
        Sizes are declared once (algorithms/base.py): computed once per model."""
        m = self._messages.get(task.index)
        if m is None:
            m = []
            for direction in ("down", "up"):
                numel = task.algorithm.message_numel(direction) + task.net.buffer_dim
                m.append((numel, self.world.network.message_bytes(numel, direction)))
            m = self._messages[task.index] = tuple(m)
        return m

    def broadcast(self, task, t: int):
        """The algorithm's broadcast, checked against its declared download size."""
        bc = task.algorithm.broadcast(t)
        got = int(sum(v.numel() for v in bc.vectors))
        want = task.algorithm.message_numel("down")
        if got != want:
            raise InvariantError(f"{task.algorithm.name} broadcasts {got} parameters but declares {want} "
                                 "(down_vectors x dim): a flemu bug")
        return bc

    # -- the pieces of a client's work --------------------------------------------------
    def begin(self, client, task, t: int, log, draws=None) -> Work:
        return Work(client, task, t, log, self.offline_watch(client), draws)

    def cohort_spec(self, task, t: int, bc):
        """The one spec a round's cohort trains from (protocols/cohort.py), or None: client by
        client (models with BatchNorm statistics and background training always are)."""
        algo = task.algorithm
        if task.net.has_buffers or not algo.cohort_path or isinstance(algo, BackgroundTraining):
            return None
        return algo.cohort_spec(t, bc)

    def plan_round(self, task, t: int, clients, steps, draws) -> Optional[list]:
        """Each participant's (download, compute, step floor, upload) seconds, computed for the
        whole round in NumPy as the vector engine does (the same seconds to the last bit), for
        participants that start at once over dedicated links; None where transfers share links
        (their times depend on the other flows)."""
        w = self.world
        if w.network.flows is None and len(clients):
            d, dur, floor, u = round_times(self, task, t, np.asarray(clients, dtype=np.int64), steps, draws)
            return list(zip(d.tolist(), dur.tolist(), floor.tolist(), u.tolist()))
        return None

    def round_draws(self, t: int, clients, steps=None) -> RoundDraws:
        """The round's bulk random draws for the clients that work in it (sim/draws.py)."""
        return RoundDraws(self.world, t, clients, steps)

    def _send(self, work: Work, nbytes: int, direction: str, seconds: Optional[float] = None):
        """Start a transfer of `nbytes` (taking `seconds` where the round planned it); returns
        the event of its arrival. `_sent` records it once it has arrived."""
        env, w = self.env, self.world
        work.phase = State.DOWNLOADING if direction == "down" else State.UPLOADING
        work.t0 = env.now
        if w.recorder.events is not None:
            self.set_state(work.client, work.phase, work.t)
        if seconds is not None:          # planned for the round (a dedicated link: `plan_round`)
            work.transfer = None         # (a timeout: nothing to cancel)
            return env.timeout(seconds)
        jitter = work.draws.jitter_of(work.client.id, direction)
        rng = work.rng(w.streams) if jitter is None and work.client.link.jitter > 0 else None
        work.transfer = w.network.transfer(work.client, nbytes, direction, jitter, rng)
        return work.transfer.event

    def _sent(self, work: Work, numel: int, nbytes: int, direction: str) -> None:
        """Record an arrived transfer of `numel` parameters in `nbytes`: its seconds, bytes and
        message (a multicast broadcast's bytes once per round)."""
        work.transfer = None
        cells, i = work.cells, work.row
        cells.comm_time[i] += self.env.now - work.t0
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

    def submit_job(self, task, client: int, t: int, steps: int, spec, buffers, rows=None):
        """The TrainJob of `client` in round t (a model with BatchNorm statistics starts from
        `buffers`, those it downloaded, unless the spec says otherwise); returns its future."""
        if task.net.has_buffers and spec.buffers is None:
            spec.buffers = buffers
        return self.world.executor.submit(TrainJob(task.index, client, t, steps, spec, task.batch_size, rows=rows))

    def compute(self, work: Work, spec, steps: int, duration: Optional[float] = None,
                record_steps: Optional[int] = None, unit_floor: Optional[float] = None, rows=None):
        """Piece: submit the TrainJob of `steps` local steps from `spec` and be busy for its
        compute time (one timeout: nothing can change the outcome in between); returns the
        job's future, resolved only when something reads it. `duration` (default: from the
        client's compute model) fixes the time, `record_steps` what clients.csv `steps` says
        (default: the SGD steps), `unit_floor` a lower bound on one recorded step's time,
        `rows` a subset of the client's samples to train on."""
        fut, done = self._start_compute(work, spec, steps, duration, record_steps, unit_floor, rows)
        yield done if work.offline is None else done | work.offline
        if not done.processed:
            raise WentOffline()
        self._computed(work)
        return fut

    def _start_compute(self, work: Work, spec, steps: int, duration: Optional[float] = None,
                       record_steps: Optional[int] = None, unit_floor: Optional[float] = None, rows=None):
        """`compute` up to its wait: returns (the job's future, the event of its end)."""
        env, task, c = self.env, work.task, work.client
        if duration is None:
            clock = c.clock(work.t, env.now, task.index, work.draws.draw(c.id))
            duration = clock.time(steps)
            unit_floor = clock.min_step(steps) if steps > 0 else 0.0
        # spec None: the round's cohort holds this client's job (protocols/cohort.py)
        fut = None if spec is None else self.submit_job(task, c.id, work.t, steps, spec, work.buffers, rows)
        work.phase, work.t0, work.dur = State.COMPUTING, env.now, duration
        work.unit = steps if record_steps is None else record_steps
        work.unit_floor = unit_floor or 0.0
        if self.world.recorder.events is not None:
            self.set_state(c, State.COMPUTING, work.t, f"{steps} steps")
        # always an event, even of 0 s (equal-time uploads then keep the order of their causes,
        # as the vector engine orders them: protocols/vector.py); an infinite step time never
        # ends: an event that never fires
        return fut, (env.timeout(duration) if math.isfinite(duration) else env.event())

    def _computed(self, work: Work) -> None:
        cells, i = work.cells, work.row
        cells.steps[i] = work.unit
        cells.compute_time[i] = work.dur
        cells.min_compute[i] = work.unit * work.unit_floor

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
        log, i = work.log, work.row
        elapsed = self.env.now - work.t0
        if work.phase == State.COMPUTING:
            done = int(math.floor(work.unit * elapsed / work.dur + 1e-9)) if work.dur > 0 else work.unit
            log.compute_time[i] = elapsed
            log.steps[i] = done
            log.min_compute[i] = done * work.unit_floor
        elif work.phase in (State.DOWNLOADING, State.UPLOADING):
            log.comm_time[i] += elapsed
        if drop:
            log.drop(work.client.id, reason)
        self.set_state(work.client, State.OFFLINE if reason == "offline" else State.DROPPED, work.t, reason)
        if on_stop is not None:
            on_stop(work.client.id, reason)

    def participate(self, client, task, t: int, bc, steps: int, log, on_arrival: Callable,
                    on_fail: Optional[Callable] = None, after=None, draws=None, cohort: bool = False, plan=None):
        """The usual round of a participant, a generator of the events it waits for: download
        the broadcast, compute `steps` local steps, upload; `on_arrival(client_id, upload,
        steps)` when the upload lands, `on_fail(client_id)` when the client went offline.
        `after`: an event to wait for first (the client's own unfinished background job, FedUMF
        `wait`). `cohort`: the round's cohort holds its job (protocols/cohort.py): the client
        counts it when it starts computing and uploads None. `plan`: its (download, compute,
        step floor, upload) seconds, planned for the round (`plan_round`). Run inline by the
        caller's process (`yield from`, `async`), or without a process (`Driver`: a round's
        participants)."""
        work = self.begin(client, task, t, log, draws)
        algo = task.algorithm
        down, dur, floor, up_s = (None, None, None, None) if plan is None else plan
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
                fut, ev = self._start_compute(work, None, steps, dur, unit_floor=floor)
            else:
                fut, ev = self._start_compute(work, algo.local_spec(client.id, t, bc), steps, dur, unit_floor=floor)
            yield ev if off is None else ev | off
            if not ev.processed:             # the online period ended first
                raise WentOffline()
            self._computed(work)
            up = None if cohort else algo.upload(client.id, t, fut)
            ev = self._send(work, nb_up, "up", up_s)
            yield ev if off is None else ev | off
            if not ev.processed:             # the online period ended first
                raise WentOffline()
            self._sent(work, numel_up, nb_up, "up")
            self.set_state(client, State.DONE, t)
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

    # -- aggregation --------------------------------------------------------------------
    def aggregate(self, task, t: int, items: list, log, round_of=None) -> tuple:
        """Two phases: the algorithm first says which uploads it will read (`reads`: DMS
        filters here), only those are resolved (batched, with any lazy metadata such as
        probes); then it aggregates and its result (weights, per-client columns) is recorded.
        Unread uploads keep `vectors=None`: their training is never computed.
        `items` are (client, upload, steps); the upload's meta may carry `n_samples`
        (this round's data size) and `tau` (iterations). Returns (arrivals, Aggregation)."""
        algo = task.algorithm
        if isinstance(items, Cohort):            # a round's cohort (protocols/cohort.py)
            return self.aggregate_cohort(task, t, items, log)
        arrivals = [Arrival(client=cid, round=t if round_of is None else round_of(cid), vectors=None,
                            n_samples=int(u.meta.get("n_samples", task.client_sizes[cid])), steps=steps,
                            train_loss=float("nan"), meta=u.meta) for cid, u, steps in items]
        need = set(algo.reads(t, arrivals)) if arrivals else set()
        lazy_meta = [v for _, u, _ in items for v in u.meta.values() if isinstance(v, Lazy)]
        read = [(a, u) for a, (_, u, _) in zip(arrivals, items) if a.client in need]
        resolve([v for _, u in read for v in u.vectors] + [u.result for _, u in read if u.result is not None]
                + lazy_meta)
        want = algo.message_numel("up")
        for a, u in read:
            a.vectors = [force(v) for v in u.vectors]
            got = int(sum(v.numel() for v in a.vectors))
            if got != want:
                raise InvariantError(f"{algo.name}: client {a.client} uploaded {got} parameters but the "
                                     f"algorithm declares {want} (up_vectors x dim): a flemu bug")
            if u.result is not None:
                a.train_loss = force(u.result).loss_mean
        for a in arrivals:
            a.meta = {k: force(v) for k, v in a.meta.items()}
        agg = algo.aggregate(t, arrivals)
        self.record_aggregation(log, agg)
        if task.buffers is not None:
            self.average_buffers(task, agg, read)
        return arrivals, agg

    def aggregate_cohort(self, task, t: int, cohort, log) -> tuple:
        """`aggregate` of a cohort (every arrival read, as `cohort_spec` promises): its results
        go to the algorithm as columns (`Rows`), with no object per client."""
        algo = task.algorithm
        dim = algo.message_numel("up")
        if cohort.future is None:
            res_params, loss = [], np.zeros(0)
        else:
            res = force(cohort.future)
            res_params, loss = res.params, res.loss_mean
            got = res_params[0].numel()           # one job's spec: every row alike
            if got != dim:
                raise InvariantError(f"{algo.name}: clients uploaded {got} parameters but the "
                                     f"algorithm declares {dim} (up_vectors x dim): a flemu bug")
        rows = Rows(clients=cohort.clients, n_samples=task.client_sizes[cohort.clients].astype(np.int64),
                    steps=cohort.steps, params=res_params, train_loss=loss)
        agg = algo.aggregate_rows(t, rows)
        self.record_aggregation(log, agg)
        return rows, agg

    @staticmethod
    def record_aggregation(log, agg) -> None:
        """clients.csv: each client's weight and the algorithm's per-client columns."""
        log.aggregation = True
        if agg.weights:
            log.weight[log.positions(np.fromiter(agg.weights, np.int64, len(agg.weights)))] = \
                np.fromiter(agg.weights.values(), np.float64, len(agg.weights))
        for col, vals in agg.client_cols.items():
            for cid, v in vals.items():
                if isinstance(v, str):
                    log.set_extra(col, cid, v, dtype=object, default="")
                else:
                    log.set_extra(col, cid, v)

    @staticmethod
    def average_buffers(task, agg, read) -> None:
        """BatchNorm running statistics follow the clients' FedAvg-style, with the
        aggregation's own weights: b <- b + sum_i w_i (b_i - b). Weights summing to 1 give
        the weighted mean sum_i w_i b_i (FedAvg, FedProx, DMS); FedAsync's mixing weight
        alpha_k gives (1 - alpha_k) b + alpha_k b_i. Clients of weight 0 do not count."""
        b = task.buffers
        step = torch.zeros_like(b)
        for a, u in read:
            wgt = agg.weights.get(a.client, 0.0)
            if wgt and u.result is not None:
                bi = force(u.result).buffers
                if bi is not None:
                    step += wgt * (bi.to(b) - b)
        task.buffers = b + step

    def finish_aggregation(self, task, t: int, arrivals: list, log, extra: Optional[dict] = None) -> dict:
        """Evaluate (every eval_every), check for divergence, append the metrics row."""
        w = self.world
        w.rounds_done = max(w.rounds_done, t)
        run = w.sc.run
        if isinstance(arrivals, Rows):
            ok = (arrivals.steps > 0) & ~np.isnan(arrivals.train_loss)
            losses, nw = arrivals.train_loss[ok], arrivals.n_samples[ok].astype(float)
        else:
            losses = [a.train_loss for a in arrivals if a.steps > 0 and not math.isnan(a.train_loss)]
            nw = np.array([a.n_samples for a in arrivals if a.steps > 0 and not math.isnan(a.train_loss)], float)
        train_loss = float(np.dot(nw, losses) / nw.sum()) if len(losses) else float("nan")
        row = {"round": t, "model": task.index, "virtual_time": self.env.now, "wall_time": w.wall(),
               "participants": len(arrivals), "selected": int(log.selected.sum()),
               "dropped": int(log.dropped.sum()),
               "bytes_up": int(log.bytes_up.sum()), "bytes_down": int(log.bytes_down.sum()),
               "train_loss": train_loss}
        if extra:
            row.update(extra)
        diverged = None
        try:
            w.check_finite(task, t, train_loss if len(losses) else None)
        except DivergedError as e:
            diverged = e
        last = run.rounds is not None and t >= run.rounds
        due = t % run.eval_every == 0
        if run.eval_every_seconds is not None:     # a virtual-time grid instead of a round count
            # grid point k x eval_every_seconds, computed from k (a running sum would drift)
            due = self.env.now >= w.next_eval_k * run.eval_every_seconds
            while w.next_eval_k * run.eval_every_seconds <= self.env.now:
                w.next_eval_k += 1
        if diverged is None and (due or last):
            row.update(w.evaluate(task))
        w.recorder.metric(row)
        log.round_time = row.get("round_time")
        if diverged is not None:
            raise diverged
        w.keep_last_good(task)
        if w.progress is not None:
            w.progress(row)
        return row
