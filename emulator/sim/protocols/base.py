"""What every protocol shares: a client's download -> train -> upload process, the
aggregation step (resolve the uploads' lazy values, call the algorithm, record weights),
evaluation and the metrics row."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import simpy

from ...algorithms.base import Arrival
from ...compute.jobs import TrainJob
from ...compute.lazy import force, resolve
from ...errors import DivergedError
from ..client import State


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

    def arrive(self, client: int, item) -> bool:
        """Record an arrival; False if the round had already closed."""
        if self.closed:
            return False
        self.arrived.append((client, item))
        self._check()
        return True

    def fail(self) -> None:
        self.failed += 1
        self._check()


class Protocol:
    name = "?"

    def __init__(self, world, params):
        self.world = world
        self.p = params
        self.env = world.env

    def process(self):
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------
    def set_state(self, client, state: State, round_: int, detail: str = "") -> None:
        client.state = state
        self.world.recorder.event(self.env.now, client.id, state.value, round_, detail)

    def local_steps(self, client_id: int, task) -> int:
        """Fixed local work per round: local_steps, or local_epochs x ceil(n_i / B)."""
        p = self.p
        if getattr(p, "local_steps", None) is not None:
            return int(p.local_steps)
        from ...compute.batches import steps_per_epoch
        spe = steps_per_epoch(int(task.client_sizes[client_id]), task.batch_size)
        return max(1, int(math.ceil(p.local_epochs * spe - 1e-9)))

    def train_and_upload(self, client, task, t: int, bc, steps: int, log, on_arrival):
        """A client's round as a SimPy process: download the broadcast, compute `steps`
        local steps (one timeout: nothing can change the outcome in between), upload.
        An `Interrupt` (round closed, client went offline) records the partial times and
        a drop. `on_arrival(client_id, upload, steps)` is called when the upload lands."""
        env, w = self.env, self.world
        cid = client.id
        phase, t0, planned, dur = State.DOWNLOADING, env.now, steps, 0.0
        try:
            nb = w.network.message_bytes(bc.numel)
            self.set_state(client, State.DOWNLOADING, t)
            yield w.network.transfer(client, nb, "down")
            log.comm_time[cid] += env.now - t0
            log.bytes_down[cid] += nb
            log.messages.append((bc.numel, nb))

            spec = task.algorithm.local_spec(cid, t, bc)
            dur = client.compute_time(t, steps)
            fut = w.executor.submit(TrainJob(task.index, cid, t, steps, spec, task.batch_size))
            phase, t0 = State.COMPUTING, env.now
            self.set_state(client, State.COMPUTING, t, f"{steps} steps")
            if dur > 0:
                yield env.timeout(dur)
            log.steps[cid] = steps
            log.compute_time[cid] = dur

            up = task.algorithm.upload(cid, t, fut)
            nb = w.network.message_bytes(up.numel)
            phase, t0 = State.UPLOADING, env.now
            self.set_state(client, State.UPLOADING, t)
            yield w.network.transfer(client, nb, "up")
            log.comm_time[cid] += env.now - t0
            log.bytes_up[cid] += nb
            log.messages.append((up.numel, nb))
            self.set_state(client, State.DONE, t)
            on_arrival(cid, up, steps)
        except simpy.Interrupt as stop:
            elapsed = env.now - t0
            if phase == State.COMPUTING:
                log.compute_time[cid] = elapsed
                log.steps[cid] = int(math.floor(planned * elapsed / dur + 1e-9)) if dur > 0 else planned
            else:
                log.comm_time[cid] += elapsed
                if phase == State.UPLOADING:
                    log.steps[cid] = planned
                    log.compute_time[cid] = dur
            log.drop(cid, str(stop.cause))
            self.set_state(client, State.DROPPED, t, str(stop.cause))

    def aggregate(self, task, t: int, items: list, log, round_of=None) -> list:
        """Resolve the uploads (batched), let the algorithm aggregate, record weights.
        `items` are (client, upload, steps). Returns the Arrivals."""
        ups = [u for _, u, _ in items]
        resolve([v for u in ups for v in u.vectors] + [u.result for u in ups if u.result is not None])
        arrivals = []
        for cid, u, steps in items:
            res = force(u.result) if u.result is not None else None
            arrivals.append(Arrival(client=cid, round=t if round_of is None else round_of(cid),
                                    vectors=[force(v) for v in u.vectors],
                                    n_samples=int(task.client_sizes[cid]), steps=steps,
                                    train_loss=res.loss_mean if res is not None else float("nan"),
                                    meta=u.meta))
        weights = task.algorithm.aggregate(t, arrivals)
        for cid, wgt in weights.items():
            log.weight[cid] = wgt
        return arrivals

    def finish_aggregation(self, task, t: int, arrivals: list, log, extra: Optional[dict] = None) -> dict:
        """Evaluate (every eval_every), check for divergence, append the metrics row."""
        w = self.world
        w.rounds_done = max(w.rounds_done, t)
        run = w.sc.run
        losses = [a.train_loss for a in arrivals if a.steps > 0 and not math.isnan(a.train_loss)]
        nw = np.array([a.n_samples for a in arrivals if a.steps > 0 and not math.isnan(a.train_loss)], float)
        train_loss = float(np.dot(nw, losses) / nw.sum()) if losses else float("nan")
        row = {"round": t, "model": task.index, "virtual_time": self.env.now, "wall_time": w.wall(),
               "participants": len(arrivals), "selected": int(log.selected.sum()),
               "dropped": int(log.dropped.sum()),
               "bytes_up": int(log.bytes_up.sum()), "bytes_down": int(log.bytes_down.sum()),
               "train_loss": train_loss}
        if extra:
            row.update(extra)
        diverged = None
        try:
            w.check_finite(task, t, train_loss if losses else None)
        except DivergedError as e:
            diverged = e
        last = run.rounds is not None and t >= run.rounds
        if diverged is None and (t % run.eval_every == 0 or last):
            row.update(w.evaluate(task))
        w.recorder.metric(row)
        if diverged is not None:
            raise diverged
        w.last_good[task.index] = task.algorithm.global_params().detach().clone()
        if w.progress is not None:
            w.progress(row)
        return row
