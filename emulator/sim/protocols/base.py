"""What every protocol shares: a client's download -> train -> upload process, the
aggregation step (resolve the uploads' lazy values, call the algorithm, record weights),
evaluation and the metrics row."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import simpy
from pydantic import Field, model_validator

from ... import registry
from ...registry import Params

from ...algorithms.base import Arrival
from ...compute.jobs import TrainJob
from ...compute.lazy import Lazy, force, resolve
from ...errors import DivergedError
from ..client import State


LATE = 2   # SimPy priority below NORMAL (1): processed after every other event at that instant


def closing_time(env, delay: float):
    """A timeout that fires after every other event scheduled for the same instant, even
    those created at that instant: a deadline at T counts every upload arriving at T."""
    ev = simpy.events.Event(env)
    ev._ok, ev._value = True, None
    env.schedule(ev, LATE, delay)
    return ev


class _WentOffline(Exception):
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


class Protocol:
    name = "?"

    def __init__(self, world, params):
        self.world = world
        self.p = params
        self.env = world.env
        sel = getattr(params, "select", None)
        self.selector = None if sel is None else registry.get("selection", sel.model).factory(sel)

    def available(self, t: int) -> np.ndarray:
        """Ids of the clients online now (per-round models asked for round t), per device group."""
        now = self.env.now
        out = [members[model.online_mask(members, t, now)] for members, model in self.world.group_members]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

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

    def offline_watch(self, client):
        """An event that fires when the client's current online period ends (None: never
        before it finishes, for per-round availability models)."""
        until = client.availability.online_until(client.id, self.env.now)
        if math.isinf(until):
            return None
        return self.env.timeout(max(0.0, until - self.env.now))

    def train_and_upload(self, client, task, t: int, bc, steps: int, log, on_arrival, on_fail=None,
                         duration: Optional[float] = None, record_steps: Optional[int] = None,
                         rows=None):
        """A client's round as a SimPy process: download the broadcast, compute `steps`
        local steps (one timeout: nothing can change the outcome in between), upload.
        Going offline (continuous-time availability) or an `Interrupt` (the round closed)
        stops it: partial times are recorded, the client is recorded as dropped, and its
        update never reaches the aggregate. `on_arrival(client_id, upload, steps)` is called
        when the upload lands; `on_fail(client_id)` when the client went offline.
        `duration` (default: from the client's compute model) fixes the compute time;
        `record_steps` is what clients.csv `steps` records (default: the SGD steps);
        `rows` (local sample numbers) restricts this round's training to a subset of the
        client's data, and the upload then carries `n_samples = len(rows)`."""
        env, w = self.env, self.world
        cid = client.id
        phase, t0, planned, dur = State.DOWNLOADING, env.now, steps, 0.0
        offline = self.offline_watch(client)
        current = None
        try:
            nb = w.network.message_bytes(bc.numel, "down")
            self.set_state(client, State.DOWNLOADING, t)
            current = w.network.transfer(client, nb, "down")
            yield from self._wait(current.event, offline)
            log.comm_time[cid] += env.now - t0
            log.bytes_down[cid] += nb
            log.messages.append((bc.numel, nb, "down"))

            spec = task.algorithm.local_spec(cid, t, bc)
            dur = client.compute_time(t, steps, env.now, task.index) if duration is None else duration
            fut = w.executor.submit(TrainJob(task.index, cid, t, steps, spec, task.batch_size, rows=rows))
            phase, t0, current = State.COMPUTING, env.now, None
            self.set_state(client, State.COMPUTING, t, f"{steps} steps")
            if dur > 0:
                yield from self._wait(env.timeout(dur), offline)
            log.steps[cid] = steps if record_steps is None else record_steps
            log.compute_time[cid] = dur

            up = task.algorithm.upload(cid, t, fut)
            if rows is not None:
                up.meta["n_samples"] = len(rows)
            nb = w.network.message_bytes(up.numel, "up")
            phase, t0 = State.UPLOADING, env.now
            self.set_state(client, State.UPLOADING, t)
            current = w.network.transfer(client, nb, "up")
            yield from self._wait(current.event, offline)
            log.comm_time[cid] += env.now - t0
            log.bytes_up[cid] += nb
            log.messages.append((up.numel, nb, "up"))
            self.set_state(client, State.DONE, t)
            on_arrival(cid, up, steps)
        except (simpy.Interrupt, _WentOffline) as stop:
            reason = "offline" if isinstance(stop, _WentOffline) else str(stop.cause)
            if current is not None:
                current.cancel()
            elapsed = env.now - t0
            unit = planned if record_steps is None else record_steps
            if phase == State.COMPUTING:
                log.compute_time[cid] = elapsed
                log.steps[cid] = int(math.floor(unit * elapsed / dur + 1e-9)) if dur > 0 else unit
            else:
                log.comm_time[cid] += elapsed
                if phase == State.UPLOADING:
                    log.steps[cid] = unit
                    log.compute_time[cid] = dur
            log.drop(cid, reason)
            self.set_state(client, State.OFFLINE if reason == "offline" else State.DROPPED, t, reason)
            if reason == "offline" and on_fail is not None:
                on_fail(cid)

    def _wait(self, event, offline):
        if offline is None:
            yield event
            return
        yield event | offline
        if not event.processed:      # (a Timeout counts as `triggered` from its creation)
            raise _WentOffline()

    def account_energy(self, log, round_time: float) -> None:
        """Energy of every online client over the round: compute_watts x compute_time +
        transmit_watts x comm_time + idle_watts x the rest of the round (column energy_j)."""
        groups = self.world.groups
        if not any(g.energy is not None for g in groups):
            return
        e = np.full(log.n, np.nan)
        for c in self.world.clients:
            en = c.energy
            if en is None:
                continue
            i = c.id
            busy = log.compute_time[i] + log.comm_time[i]
            if log.available[i] or busy > 0:
                e[i] = (en.compute_watts * log.compute_time[i] + en.transmit_watts * log.comm_time[i]
                        + en.idle_watts * max(0.0, round_time - busy))
            else:
                e[i] = 0.0
        log.extra["energy_j"] = e

    def aggregate(self, task, t: int, items: list, log, round_of=None) -> list:
        """Two phases: the algorithm first says which uploads it will read (`reads`: DMS
        filters here), only those are resolved (batched, with any lazy metadata such as
        probes); then it aggregates and its weights and per-client values are recorded.
        Unread uploads keep `vectors=None`: their training is never computed.
        `items` are (client, upload, steps); the upload's meta may carry `n_samples`
        (this round's data size) and `tau` (iterations). Returns the Arrivals."""
        algo = task.algorithm
        arrivals = [Arrival(client=cid, round=t if round_of is None else round_of(cid), vectors=None,
                            n_samples=int(u.meta.get("n_samples", task.client_sizes[cid])), steps=steps,
                            train_loss=float("nan"), meta=u.meta) for cid, u, steps in items]
        need = set(algo.reads(t, arrivals)) if arrivals else set()
        lazy_meta = [v for _, u, _ in items for v in u.meta.values() if isinstance(v, Lazy)]
        read = [(a, u) for a, (_, u, _) in zip(arrivals, items) if a.client in need]
        resolve([v for _, u in read for v in u.vectors] + [u.result for _, u in read if u.result is not None]
                + lazy_meta)
        for a, u in read:
            a.vectors = [force(v) for v in u.vectors]
            if u.result is not None:
                a.train_loss = force(u.result).loss_mean
        for a in arrivals:
            a.meta = {k: force(v) for k, v in a.meta.items()}
        weights = algo.aggregate(t, arrivals)
        for cid, wgt in weights.items():
            log.weight[cid] = wgt
        for col, vals in (getattr(algo, "client_info", None) or {}).items():
            for cid, v in vals.items():
                log.set_extra(col, cid, v)
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
        due = t % run.eval_every == 0
        if run.eval_every_seconds is not None:     # a virtual-time grid instead of a round count
            # grid point k x eval_every_seconds, computed from k (a running sum would drift)
            due = self.env.now >= w.next_eval_k * run.eval_every_seconds
            while w.next_eval_k * run.eval_every_seconds <= self.env.now:
                w.next_eval_k += 1
        if diverged is None and (due or last):
            row.update(w.evaluate(task))
        w.recorder.metric(row)
        if diverged is not None:
            raise diverged
        w.last_good[task.index] = task.algorithm.global_params().detach().clone()
        if w.progress is not None:
            w.progress(row)
        return row
