"""`intervals`: T-SFL's time-driven synchronous FL (docs/algorithms/tsfl.md section 2).

Interval t occupies [t0, t0 + delta). The server broadcasts w^t at t0 and aggregates at
exactly t0 + delta (T-SFL section 3.1, Fig. 1). Each online client trains from w^t for as
many local iterations as fit before it must start its upload so that the upload arrives by
the interval's end (docs/algorithms/tsfl.md 2.3 [ours, A4], relative float guard 1e-9):

    if d + u > delta (1 + eps):  tau = 0, not delivered (not in U^t)
    else:                        tau = max{k : d + sum_{j<=k} c_j + u <= delta (1 + eps)}

d, u: the client's nominal download and upload times (its own link's latency and
bandwidth; over shared links or with jitter the real transfer may be slower, and an upload
that then misses the interval's end is dropped as `late`); c_j: the j-th iteration's time.
An iteration is one mini-batch step (`iteration: batch`) or one shuffled pass over the
client's data (`iteration: epoch`, docs/algorithms/tsfl.md 2.2 A1); a compute model that declares
`counts_iterations` (the `iterations` model) gives tau directly. Iterations that would not finish are not started; no work carries
over. With `min_iterations: m` only clients with tau > m upload (docs/algorithms/tsfl.md 5.2).

Time-varying data (T-SFL Case 3, docs/algorithms/tsfl.md 6.3): with `data_sizes`, client i trains in
interval t on a uniform random subset of its samples of size
|D_i^t| = min(max(floor(N(mean_g, std_g)), 1), |D_i|), g = i mod len(mean) (A23), drawn from
the `partition` stream keyed (client, t) (`redraw: once`: keyed (client, 0), one subset for
the whole run); the aggregation weighs it by |D_i^t| and an epoch is a pass over the subset.
clients.csv: `steps` = tau (iterations), `sgd_steps` = the SGD steps they took.
"""
from __future__ import annotations

import math

from typing import ClassVar, Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from ...compute.batches import steps_per_epoch
from ...registry import Params, register
from ...scenario.selection_params import SelectingProtocol
from .base import Call, Gate, Protocol, closing_time, default_select
from .outcome import record_unrun
from .selecting import Selecting

EPS = 1e-9   # docs/algorithms/tsfl.md 2.3 relative float guard


class DataSizes(Params):
    """T-SFL Case 3's time-varying |D_i^t| (docs/algorithms/tsfl.md 6.3): a subset of each client's pool."""
    mean: list[float] = Field(min_length=1, description="per data group g = client mod len: mean of |D_i^t|")
    std: list[float] = Field(min_length=1, description="per data group: standard deviation (A24)")
    redraw: Literal["per_interval", "once"] = Field("per_interval", description="a new subset every interval, or one for the run")

    @model_validator(mode="after")
    def _same_length(self):
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean and std need one value per data group each (got {len(self.mean)} and {len(self.std)})")
        if any(m <= 0 for m in self.mean) or any(s < 0 for s in self.std):
            raise ValueError("mean must be > 0 and std >= 0")
        return self


class IntervalsParams(Params, SelectingProtocol):
    interval: float = Field(gt=0, description="interval length delta, virtual seconds")
    iteration: Literal["epoch", "batch"] = Field("epoch", description="one local iteration = a pass over the client's data (epoch) or one mini-batch step (batch)")
    max_iterations: Optional[int] = Field(None, ge=0, description="cap on iterations per interval")
    min_iterations: Optional[int] = Field(None, ge=0, description="only clients with tau > m upload (T-SFL 2-/4-iteration systems)")
    select: "SelectionSpec" = Field(default_factory=default_select, description="which online clients take part")
    data_sizes: Optional[DataSizes] = Field(None, description="time-varying local data (T-SFL Case 3); none = all samples")
    probe_phase: ClassVar[bool] = False     # the interval's clock cannot take a probe phase

    def deadline(self):
        return self.interval


class Intervals(Protocol):
    name = "intervals"
    charges_evaluation = True

    def __init__(self, world, params):
        super().__init__(world, params)
        self.selecting = Selecting(self, params.select)
        self.selector = self.selecting.selector

    def subset(self, cid: int, t: int, pool: int) -> Optional[np.ndarray]:
        """This interval's local sample numbers (Case 3), or None for all of them."""
        ds = self.p.data_sizes
        if ds is None:
            return None
        g = cid % len(ds.mean)
        rng = self.world.streams.keyed("partition", cid, t if ds.redraw == "per_interval" else 0, 3)
        size = min(max(int(np.floor(rng.normal(ds.mean[g], ds.std[g]))), 1), pool)
        return np.sort(rng.choice(pool, size, replace=False))

    def fit_iterations(self, client, task, t: int, start: float, budget: float, n_samples: Optional[int] = None,
             draw=None) -> tuple:
        """(tau, SGD steps per iteration, compute seconds, lower bound on one iteration's
        time) for `budget` seconds of compute starting at `start` (one clock: one speed draw
        per client per interval)."""
        clock = client.clock(t, start, task.index, draw)
        n = int(task.client_sizes[client.id]) if n_samples is None else n_samples
        spi = steps_per_epoch(n, task.batch_size) if self.p.iteration == "epoch" else 1
        if client.compute.counts_iterations:           # declared: the model counts iterations itself
            tau = clock.fit(budget)
            cap = self.p.max_iterations
            tau = tau if cap is None else min(tau, cap)
            return tau, spi, clock.time(tau), (clock.min_step(tau) if tau else 0.0)
        tau = clock.fit(budget) // spi
        if self.p.max_iterations is not None:
            tau = min(tau, self.p.max_iterations)
        return tau, spi, clock.time(tau * spi), (spi * clock.min_step(tau * spi) if tau else 0.0)

    @staticmethod
    def within(t0: float, d: float, dur: float, u: float, delta: float) -> float:
        """The compute time, trimmed by at most the float guard (docs/algorithms/tsfl.md 2.3) so that the
        upload SimPy schedules at ((t0 + d) + dur) + u is not an ulp past the close t0 + delta:
        tau was accepted because it fits, so it must also arrive."""
        close = t0 + delta
        if dur <= 0 or (t0 + d + dur) + u <= close:
            return dur
        trimmed = max(0.0, (close - u) - (t0 + d))
        if dur - trimmed > 2 * EPS * delta + 1e-12:     # more than float noise: not ours to hide
            return dur
        for _ in range(64):
            if (t0 + d + trimmed) + u <= close or trimmed <= 0.0:
                break
            trimmed = math.nextafter(trimmed, 0.0)
        return trimmed

    def process(self):
        w = self.world
        t = 0
        while not w.should_stop():
            t += 1
            yield from self.interval(t)
            yield from self.hold_for_evaluation()

    def interval(self, t: int):
        w, env, p = self.world, self.env, self.p
        task = w.tasks[0]
        delta = p.interval
        t0 = env.now
        log = w.recorder.round_log(t)
        avail = self.available(t)
        log.available[avail] = True
        chosen = yield from self.selecting.select(t, avail)
        log.selected[chosen] = True
        bc = self.broadcast(task, t)
        gate = Gate(env, 0)              # collects arrivals; the interval closes on the clock
        procs = []
        sheet = self.open_sheet(log, task)
        (_, nb_down), (_, nb_up) = sheet.messages
        draws = self.round_draws(t, chosen)
        for cid in chosen:
            c = w.clients[cid]
            d = w.network.nominal_time(c, nb_down, "down")
            u = w.network.nominal_time(c, nb_up, "up")
            if d + u > delta * (1 + EPS):          # cannot even deliver: tau = 0, not in U^t
                log.drop(cid, "undeliverable")
                continue
            rows = self.subset(cid, t, int(task.client_sizes[cid]))
            tau, spi, dur, floor = self.fit_iterations(c, task, t, t0 + d, delta - d - u, None if rows is None else len(rows),
                                             draws.draw(cid))
            dur = self.within(t0, d, dur, u, delta)
            if rows is not None:
                log.set_extra("n_samples", cid, len(rows), dtype=np.int64, default=0)
            log.record_sgd_steps(cid, tau * spi)
            if p.min_iterations is not None and tau <= p.min_iterations:
                # not allowed to upload (docs/algorithms/tsfl.md 5.2): its work is never read, so never computed;
                # its virtual compute time still counts
                record_unrun(log, cid, tau, dur, tau * floor, "min_iterations")
                continue
            plan = (tau, spi, dur, floor, rows)
            procs.append(env.process(self.train_for(Call(task, t, bc, sheet, draws, gate.arrive), c, plan)))
        yield closing_time(env, delta)           # aggregates at exactly t0 + delta, uploads at t0 + delta count
        items = yield from self.close_round(gate, procs)
        sheet.close(env.now)
        arrivals, agg = self.aggregate(task, t, items, log)
        self.selecting.observe(t, log, items, arrivals)
        taus = [a.meta["tau"] for a in arrivals]
        extra = {"round_time": env.now - t0, "n_candidates": len(arrivals),
                 "tau_mean": float(np.mean(taus)) if taus else float("nan"),
                 "heterogeneity": float(np.var(taus)) if taus else float("nan")}   # T-SFL fn. 1, ddof 0
        extra.update(agg.round_cols)
        self.finish_aggregation(task, t, arrivals, log, extra)

    def train_for(self, call, client, plan):
        """A candidate's interval: download, tau iterations (tau x spi SGD steps in the planned
        `dur` seconds; on `rows` only, Case 3), upload its model with tau (and |D_i^t|).
        `plan`: (tau, spi, dur, floor, rows)."""
        tau, spi, dur, floor, rows = plan
        task, t = call.task, call.round
        work = self.begin(client, task, t, call.sheet, call.draws)
        algo = task.checked              # the algorithm's verbs, checked (boundary/algorithm.py)

        def body():
            yield from self.download(work)
            fut = yield from self.compute(work, algo.local_spec(client.id, t, call.bc), tau * spi, duration=dur,
                                          record_steps=tau, step_floor=floor, rows=rows)
            up = algo.upload(client.id, t, fut)
            up.meta["tau"] = tau
            if rows is not None:
                up.meta["n_samples"] = len(rows)
            yield from self.upload(work)
            call.arrive(client.id, up, tau * spi)

        yield from self.guard(work, body())


register("protocol", "intervals", IntervalsParams,
         "T-SFL time-driven rounds: every `interval` s the server aggregates what arrived; "
         "clients train as many iterations as fit", Intervals)
