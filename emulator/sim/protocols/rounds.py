"""`rounds`: classic synchronous FL rounds (FedAvg, FedProx, ...).

Round t: the server picks participants among the clients available now, broadcasts,
and waits for `all` of them, for a `deadline`, or for the `first_k` uploads; the round
lasts as long as what it waits for. Participants still working when the round closes
are stopped and recorded as dropped (`late`); offline clients are recorded as dropped
(`offline`) and their updates never reach the aggregate.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np

from pydantic import BeforeValidator, Field

from ...algorithms.base import BackgroundTraining
from ...codecs.exchange import ExchangeCodec
from ...registry import Params, register
from ..client import State
from .background import Background
from ...scenario.selection_params import SelectingProtocol
from .base import Call, Gate, LocalWorkParams, Protocol, closing_time, default_select
from .exchange import SecondPhase
from .secagg import SecureAggregation
from .selecting import Selecting
from .cohort import submit_cohort
from ..simpy_internals import Driver
from .vector import vector_round


class WaitAll(Params):
    mode: Literal["all"] = "all"


class WaitDeadline(Params):
    mode: Literal["deadline"]
    seconds: float = Field(gt=0, description="the round closes this many seconds after it starts")


class WaitFirstK(Params):
    mode: Literal["first_k"]
    k: int = Field(ge=1, description="the round closes when k uploads have arrived")

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.k > fleet.clients:
            out.append((f"{at}.k", f"waits for {self.k} uploads, but clients.count is {fleet.clients}"))
        return out


Wait = Annotated[Union[WaitAll, WaitDeadline, WaitFirstK], Field(discriminator="mode"),
                 BeforeValidator(lambda v: {"mode": v} if isinstance(v, str) else v)]


class RoundsParams(LocalWorkParams, SelectingProtocol):
    select: "SelectionSpec" = Field(default_factory=default_select,
                                    description="server-side selection among available clients")
    wait: Wait = Field(default_factory=WaitAll, description="all | {mode: deadline, seconds} | {mode: first_k, k}")
    broadcast: Literal["unicast", "multicast"] = Field(
        "unicast", description="download bytes: one message per recipient, or one per round (a one-to-all "
                               "wireless broadcast; each recipient still takes its link's time)")
    engine: Literal["auto", "process", "vector"] = Field(
        "auto", description="process: a SimPy process per participant; vector: NumPy over the round and one "
                            "timeout (when nothing can interrupt a client mid-round); auto: vector where it applies")

    def deadline(self):
        return self.wait.seconds if self.wait.mode == "deadline" else None


class Rounds(Protocol):
    name = "rounds"
    charges_evaluation = True
    exchanges = True

    def __init__(self, world, params):
        super().__init__(world, params)
        self.selecting = Selecting(self, params.select)
        self.selector = self.selecting.selector
        self.multicast = params.broadcast == "multicast"
        self.last_participants = 0
        self.background = Background(self)
        sa = world.sc.secure_aggregation        # docs/algorithms/secagg.md
        self.secagg = None if sa is None else SecureAggregation(sa, world.network)
        codec = world.network.codecs["up"]      # an exchange codec's second phase (docs/algorithms/compression.md 2.6)
        self.second_phase = SecondPhase(world.network, self.exchange_sizes(world.tasks[0])) \
            if isinstance(codec, ExchangeCodec) else None
        why = self.vector_blockers()
        if params.engine == "vector" and why:
            from ...errors import ScenarioError
            raise ScenarioError([("protocol.engine", f"the vector engine needs rounds nothing can interrupt; "
                                                     f"here {why[0]} (use engine: process or auto)")])
        self.engine = "vector" if params.engine == "vector" or (params.engine == "auto" and not why) else "process"

    def vector_blockers(self) -> list:
        """What makes the vector engine inapplicable (empty: it applies)."""
        w = self.world
        why = []
        if w.time_availability:
            why.append("clients go offline in continuous time (availability)")
        if w.network.flows is not None:
            why.append("transfers share links (network.server_link / topology)")
        if any(isinstance(t.algorithm, BackgroundTraining) for t in w.tasks):
            why.append("the algorithm trains unselected clients in the background")
        if w.recorder.events is not None:
            why.append("the event trace is on (output.events)")
        return why

    def summary(self) -> dict:
        return {"engine": self.engine}

    def process(self):
        empty_streak = 0

        def each(t):
            nonlocal empty_streak
            before = self.env.now
            yield from self.round(t)
            empty_streak = empty_streak + 1 if self.env.now == before and self.last_participants == 0 else 0
            if empty_streak >= 10_000:
                self.world.stall(f"{empty_streak} rounds in a row without any participant at virtual time "
                                 f"{self.env.now:g}")
                return True
            return False
        if (yield from self.run_rounds(each)) is not None:     # stalled: nothing left to stop
            yield from self.background.stop_all()

    def round(self, t: int):
        w, env = self.world, self.env
        task = w.tasks[0]
        start = env.now
        avail = self.available(t)
        chosen = yield from self.selecting.select(t, avail)
        background = isinstance(task.algorithm, BackgroundTraining)
        log = self.round_log(t, chosen, avail, every_client=background)
        if background:
            task.algorithm.begin_round(t, chosen, avail)
        setup = (yield from self.secagg.setup(env, chosen)) if self.secagg is not None else None
        bc = self.broadcast(task, t)
        ids = np.asarray(chosen).tolist()
        unselected = self.unselected(ids, avail) if background else []
        workers = ids + unselected
        steps = self.steps_of(workers, task)
        draws = self.round_draws(t, workers, steps)
        if self.engine == "vector":
            items = yield from vector_round(self, task, t, chosen, steps[:len(ids)], log, bc, draws)
        else:
            items = yield from self.process_round(task, t, ids, steps, log, bc, draws, unselected)
        self.last_participants = len(items)
        secure = {} if setup is None else (yield from self.secagg.round(self, ids, items, log, setup))
        # the server aggregates once an exchange codec's second phase is over (compression.md 2.6)
        arrivals, commit = self.read_uploads(task, t, items)
        second = {} if self.second_phase is None else (yield from self.second_phase.round(env, arrivals, log))
        agg = commit(log)
        self.selecting.observe(t, log, items, arrivals)
        self.finish_aggregation(task, t, arrivals, log,
                                {"round_time": env.now - start, **agg.round_cols, **secure, **second})

    def round_log(self, t: int, chosen, avail, every_client: bool):
        """Round t's log: a row per client, or (`output.clients_csv: participants`, unless
        `every_client`: background work has rows too) per participant."""
        rec = self.world.recorder
        if rec.participants_only and not every_client:
            log = rec.round_log(t, ids=chosen)
            log.available[:] = True
        else:
            log = rec.round_log(t)
            log.available[avail] = True
        log.selected[log.positions(chosen)] = True
        return log

    @staticmethod
    def unselected(ids: list, avail) -> list:
        """The online clients not selected (they train in the background: FedUMF Alg.1 L6)."""
        picked = set(ids)
        return [c for c in np.asarray(avail).tolist() if c not in picked]

    def process_round(self, task, t: int, ids: list, steps, log, bc, draws, unselected: list):
        """Generator: round t under the process engine: the participants `ids` (and the
        `unselected` clients' background work) as SimPy events, until the round closes.
        Returns the arrived items (client, upload, steps), or the arrivals' Cohort."""
        w, env, wait = self.world, self.env, self.p.wait
        algo = task.algorithm
        background = isinstance(algo, BackgroundTraining)
        gate = Gate(env, len(ids), wait.k if wait.mode == "first_k" else None)
        spec = self.cohort_spec(task, t, bc)
        planned = None if background else self.planned_seconds(task, t, ids, steps[:len(ids)], draws)
        sheet = self.open_sheet(log, task)
        call = Call(task, t, bc, sheet, draws, gate.arrive, gate.fail, cohort=spec is not None)
        parts = []
        events = w.recorder.events is not None
        for cid, k, secs in zip(ids, steps.tolist(), [None] * len(ids) if planned is None else planned):
            c = w.clients[cid]
            if events:
                self.set_state(c, State.SELECTED, t)
            first = self.background.settle(c, task, t, algo.unfinished) if background else None
            parts.append(Driver(self.participate(call, c, k, secs, after=first)))
        self.start_participants(parts)
        for cid in unselected:
            self.background.start(w.clients[cid], task, t, bc, log, draws)
        if wait.mode == "deadline":
            yield gate.done | closing_time(env, wait.seconds)
        else:
            yield gate.done
        items = yield from self.close_round(gate, parts)
        sheet.close(env.now)
        if spec is not None:             # the arrivals' cohort (late clients' jobs were counted as they started)
            came, _, came_steps = zip(*items) if items else ((), (), ())
            items = submit_cohort(w.executor, task, t, spec, came, came_steps, counted=True)
        if background:                   # clients.csv `trained`: participants that computed too
            for cid in ids:
                if log.steps[cid] > 0:
                    log.set_extra("trained", cid, True, dtype=bool, default=False)
        return items


register("protocol", "rounds", RoundsParams,
         "synchronous rounds: select k of the available clients, wait for all / a deadline / the first k",
         Rounds)
