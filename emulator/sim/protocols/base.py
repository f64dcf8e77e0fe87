"""What every protocol shares (docs/engine.md): `Protocol`, the base of `rounds`, `intervals`,
`async` and `multi_model`, made of the pieces of a client's work (work.py: `Pieces`), the
aggregation step (aggregation.py: `Aggregating`) and what is here: who is online, waiting for
someone, the round loop, closing a round (`Gate`, `close_round`), message sizes, the
broadcast, and how a round goes (cohort or client by client; planned seconds; bulk draws).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Optional

import numpy as np
from pydantic import Field, model_validator

from ... import registry
from ...algorithms.base import BackgroundTraining
from ...codecs.encoding import cast_broadcast
from ...codecs.exchange import ExchangeCodec, layout_of
from ...boundary import codec as codec_boundary         # a codec's sizes, checked (boundary/codec.py)
from ...boundary import devices as devices_boundary     # availability answers, checked (boundary/devices.py)
from ...registry import Params
from ..client import State
from ..draws import RoundDraws
from ..simpy_internals import closing_time, start_all  # noqa: F401 (closing_time: protocols import it here)
from .aggregation import AFTER_RECORD, BEFORE_RECORD, Aggregating
from .round_times import round_times
from .sheet import OpenSheets
from .work import Call, Pieces, Work, WentOffline  # noqa: F401 (re-exported: protocols import them here)


class Gate:
    """Counts a round's outcomes and fires `done` once `need` uploads arrived or every
    participant arrived or failed (a counter and one event, not AllOf)."""

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
    from ...scenario.schema import member
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


class Protocol(Pieces, Aggregating, ABC):
    """A protocol: owns virtual time (its `process` is the run's SimPy process) and composes
    the pieces of clients' work into rounds. Required: `process` (abstract); optional:
    `summary`, `models_due`. Declares `multi_model` and `records_per_job`."""

    name = "?"
    #: trains several models at once (`workloads:`); single-model protocols refuse them
    multi_model = False
    #: records one clients.csv row per client job (JOB logs, sim/recorder.py), not per round
    records_per_job = False
    #: runs an exchange codec's second phase after each aggregation (its extra round trip in
    #: virtual time: sim/protocols/exchange.py, docs/algorithms/compression.md 2.6)
    exchanges = False
    #: pauses between rounds for a charged per-client evaluation (`evaluation.charge`,
    #: docs/fairness.md): its loop calls `hold_for_evaluation` after each aggregation
    charges_evaluation = False

    def __init__(self, world, params):
        self.world = world
        self.p = params
        self.env = world.env
        self.multicast = False          # a protocol with `broadcast: multicast` sets it
        self.multicast_counted = set()  # (model, round) of the multicast broadcasts whose bytes are counted
        self._messages = {}             # model -> its messages' (parameters, bytes), down and up
        self._encodings = {}            # model -> its upload codec, when it changes values (aggregation.py)
        self.selector = None            # a protocol with `select` sets it (selecting.py: `Selecting`)
        self.selection_weights = None   # {client: weight} of the round's selection, when it gives them
        self.open_sheets = OpenSheets()  # outcome sheets not yet closed (work.py: `open_sheet`)
        self.evaluation_wait = 0.0      # seconds a charged evaluation holds the next round (`hold_for_evaluation`)
        # what follows each aggregation (sim/protocols/aggregation.py): callbacks (world, Aggregated)
        self.before_record = list(BEFORE_RECORD)
        self.after_record = list(AFTER_RECORD)

    def available(self, t: int) -> np.ndarray:
        """Ids of the clients online now (per-round models asked for round t), per device group."""
        now = self.env.now
        out = [members[devices_boundary.mask(model.online_mask(members, t, now), len(members), model, t)]
               for members, model in self.world.group_members]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    @abstractmethod
    def process(self):
        """Required. The run's SimPy process (a generator): every round, until the run stops."""

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
        fleet = self.world.clients          # the groups' models, asked per member (no client object made)
        timed = [(m, fleet.members(gi)) for gi, m in enumerate(self.world.availabilities) if m.kind == "time"]
        nxt = min((devices_boundary.moment(m.next_online(int(c), now), now, m, "next_online")
                   for m, ids in timed for c in ids), default=math.inf)
        if now < nxt < math.inf:
            yield self.env.timeout(nxt - now)
            return True
        if math.isinf(nxt) and sum(len(ids) for _, ids in timed) == len(fleet):
            self.world.stall("no client will ever be online again")
            return None
        return False

    def close_round(self, gate, procs):
        """Generator: the round closes now. Participants still working are interrupted ('late':
        their rows say so, one 0 s timeout); returns the arrived items [(client, upload,
        steps)] in arrival order. The caller then closes the round's outcome sheet."""
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
            yield from self.hold_for_evaluation()
        return True

    def hold_for_evaluation(self):
        """Generator, after an aggregation: a charged per-client evaluation ran on it; the next
        round starts when its slowest client has finished (docs/fairness.md, "Charged")."""
        wait, self.evaluation_wait = self.evaluation_wait, 0.0
        if wait > 0:
            yield self.env.timeout(wait)

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
        until = devices_boundary.moment(client.availability.online_until(client.id, self.env.now), self.env.now,
                                        client.availability, "online_until")
        if math.isinf(until):
            return None
        return self.env.timeout(max(0.0, until - self.env.now))

    def message_numel(self, task, direction: str) -> int:
        """Parameters of one message: what the algorithm declares, plus the BatchNorm
        statistics of models that have them (they travel with the model, as in FedAvg)."""
        return self.messages(task)[direction == "up"][0]

    def messages(self, task) -> tuple:
        """((parameters, bytes) of a download, (parameters, bytes) of an upload) of this model.
        Sizes are declared once (algorithms/base.py): computed once per model; with an exchange
        codec on the upload, from the model's layout (docs/algorithms/compression.md 2.6)."""
        m = self._messages.get(task.index)
        if m is None:
            net = self.world.network
            numel = [task.algorithm.message_numel(d) + task.net.buffer_dim for d in ("down", "up")]
            codec = net.codecs["up"]
            if isinstance(codec, ExchangeCodec):
                m = net.exchange_messages(*numel, self.exchange_sizes(task))
            else:
                m = tuple((n, net.message_bytes(n, d)) for n, d in zip(numel, ("down", "up")))
            self._messages[task.index] = m
        return m

    def exchange_sizes(self, task):
        """The message sizes of the upload's exchange codec for this model (compression.md 2.6), checked."""
        codec = self.world.network.codecs["up"]
        return codec_boundary.exchange_sizes(codec, codec.exchange_bytes(layout_of(task), self.world.network.bytes_per_param))

    def broadcast(self, task, t: int):
        """The algorithm's broadcast, checked against its declared download size (boundary/algorithm.py),
        as the clients decode it (the download codec: docs/algorithms/compression.md 1.4)."""
        return cast_broadcast(self.world.network.codecs["down"], task.checked.broadcast(t),
                              lambda: self.world.streams.keyed("codec.down", task.index, t))

    # -- how a round goes ----------------------------------------------------------------
    def cohort_spec(self, task, t: int, bc):
        """The one spec a round's cohort trains from (protocols/cohort.py), or None: client by
        client (models with BatchNorm statistics and background training always are)."""
        algo = task.algorithm
        if task.net.has_buffers or not algo.cohort_path or isinstance(algo, BackgroundTraining):
            return None
        return task.checked.cohort_spec(t, bc)

    def planned_seconds(self, task, t: int, clients, steps, draws) -> Optional[list]:
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


registry.extension_point("protocol", Protocol, functions=False)

