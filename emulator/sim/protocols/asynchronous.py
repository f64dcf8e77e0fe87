"""`async`: asynchronous FL (FedAsync, Xie et al.; docs/algorithms/tsfl.md 5.4).

Every client loops on its own: download the current model (and its version), train its
local steps, upload; the server merges each arrival the moment it lands (in arrival order;
SimPy's order at equal times), and the client is re-triggered at once (`trigger:
immediate`, so every online client is always busy). An offline client waits until it is
next online; going offline mid-work loses that update.

Three counts, one name each (docs/engine.md, "async"):
- `job`: a client's job key, 1, 2, ... per client; it advances at every try (a client that
  had to wait offline skips numbers). Per-round availability models are asked with it as
  their round; batches and network draws are keyed by it (`Call.round`, `Work.round`);
  clients.csv `job`.
- `version`: the model version, the updates the algorithm applied (`VersionedModel`);
  `downloaded`: the version a job downloaded (its staleness is counted from it). With a
  buffer of K > 1 arrivals, the version advances once every K merges. metrics.csv `version`.
- `merge`: the merge index, 1, 2, ...: the server's merges so far, this one included. It is
  the aggregation's round (`aggregate`, `finish_aggregation`, `run.rounds`,
  `run.eval_every`) and the `round` column of metrics.csv (one row per merge) and of
  clients.csv.

clients.csv has one row per client job that ended (not one per client per merge): `round`
is the merge it was aggregated in. A job lost to a dropout is recorded too, with `dropped`
and the reason, under the next merge (the one it would have counted toward at the
earliest); it is not an aggregation, so it never enters the delay metrics or the merge
count. `(client, job)` is unique; so is `(round, client)` among aggregated rows. `available`
is True on every row (a client starts a job only when online): per-merge availability of the
fleet is not recorded under async. Evaluation: every `run.eval_every` merges or, with
`run.eval_every_seconds`, at the first merge at or after each point of that time grid.
"""
from __future__ import annotations

import math


from ...algorithms.base import VersionedModel
from ...boundary import devices as devices_boundary
from ...registry import register
from .base import Call, LocalWorkParams, Protocol


class AsyncParams(LocalWorkParams):
    """Local work per job (H local steps, Xie Alg. 1)."""


class Async(Protocol):
    name = "async"
    records_per_job = True          # clients.csv: one JOB log per client job (sim/recorder.py)

    def __init__(self, world, params):
        super().__init__(world, params)
        for task in world.tasks:
            if not isinstance(task.algorithm, VersionedModel):
                raise TypeError(f"protocol async needs an algorithm whose server model is versioned "
                                f"(algorithms.base.VersionedModel); {task.algorithm.name} is not")

    def process(self):
        w, env = self.world, self.env
        self.finished = False
        self.done = env.event()
        self.merges = 0                 # merges so far: the last merge index
        self.t_last = 0.0
        self._waiters = []
        for c in w.clients:
            env.process(self.client_loop(c, w.tasks[0]))
        yield self.done

    def client_loop(self, client, task):
        env, w = self.env, self.world
        job = 0
        while not self.finished:
            job += 1
            now = env.now
            if not client.availability.online(client.id, job, now):
                nxt = devices_boundary.moment(client.availability.next_online(client.id, now), now,
                                              client.availability, "next_online")
                if math.isinf(nxt):
                    return
                if nxt <= now:       # per-round model said offline: try again at the next merge
                    ev = env.event()
                    self._waiters.append(ev)
                    yield ev
                else:
                    yield env.timeout(nxt - now)
                continue
            downloaded = task.algorithm.version
            bc = self.broadcast(task, job)
            log = w.recorder.job_log(client.id, job, task.index)
            log.available[0] = log.selected[0] = True
            steps = self.local_steps(client.id, task)
            sheet = self.open_sheet(log, task)       # the job's outcome, recorded when it ends
            call = Call(task, job, bc, sheet, None,
                        lambda cid, up, st: self.merge(task, cid, up, st, sheet, downloaded))
            yield from self.participate(call, client, steps)
            if sheet in self.open_sheets:            # it stopped (or arrived once the run was over)
                sheet.close(env.now)
                if log.dropped[0] and not self.finished:    # lost work is recorded, not aggregated:
                    w.recorder.commit(log, self.merges + 1)  # under the next merge

    def merge(self, task, cid, up, steps, sheet, downloaded):
        """The server merges one arrival (Xie Alg. 1 updater): the job that downloaded model
        version `downloaded`."""
        if self.finished:
            return
        env, w = self.env, self.world
        sheet.close(env.now)
        log = sheet.log
        merge = self.merges + 1             # this merge's index: the aggregation's round
        arrivals, agg = self.aggregate(task, merge, [(cid, up, steps)], log, round_of=lambda c: downloaded)
        self.merges = merge
        w.recorder.commit(log, merge)
        extra = {"round_time": env.now - self.t_last, "version": task.algorithm.version, **agg.round_cols}
        self.t_last = env.now
        self.finish_aggregation(task, merge, arrivals, log, extra)
        waiters, self._waiters = self._waiters, []
        for ev in waiters:
            ev.succeed()
        if w.should_stop():
            self.finished = True
            if not self.done.triggered:
                self.done.succeed()


register("protocol", "async", AsyncParams,
         "asynchronous FL: every client loops download -> train -> upload; the server merges each arrival", Async)
