"""`multi_model`: M models trained at once on one client pool (docs/algorithms/multimodel.md;
"Multi-Model Federated Learning with Provable Guarantees", Bhuyan, Moharir, Joshi).

Round t (Alg. 1): the assignment (devices/assignment.py: `mfa_rand` Alg. 2, `mfa_rr` Alg. 3,
or the `sequential` baseline) gives every participating client exactly one model; each model's
group downloads that model, runs its local steps (the step time follows the model: a FLOP-based
profile makes a CNN step slower than a logistic-regression step) and uploads; model m is
aggregated by its own algorithm (the top-level `algorithm` block with the workload's
overrides) when its last client reports (or at the deadline), so each model has its own
latency; the round ends when every model has aggregated. Idle clients (partial
participation) do nothing and are recorded with `model = -1`.

Records: metrics.csv one row per (round, model) with `frame, u, group` (MFA-RR: the 1-based
group j that trained the model), `n_clients`, `lr`, `model_time` (seconds from the round's start
to the model's aggregation); clients.csv one row per client per round with `model`;
summary.json `multi_model`: per model the first round / virtual time its metric met the
target, T_P (all models at once, spec A12), and the gain M T_1 / T_P when T_1 is given (or,
for a `sequential` run, each model's own T_1 and its virtual time).
"""
from __future__ import annotations

from typing import Literal, Optional, Union

import numpy as np
import torch
from pydantic import Field, model_validator

from devices.assignment import MfaRand, MfaRR, Sequential

from ...measures import gain as G
from ...registry import Params, register
from ..client import State
from .base import Call, Gate, LocalWorkParams, Protocol, closing_time
from ..simpy_internals import Driver
from ...workloads.models import StartsAtZero
from .rounds import Wait, WaitAll


class GainParams(Params):
    """How the gain g = M T_1(eps) / T_P(M, eps) is read off a run (docs/algorithms/multimodel.md section 3)."""
    metric: str = Field("test_acc", description="metrics.csv column: gap, dist_to_opt, test_loss (lower is better) "
                                                "or test_acc, full_train_acc (higher is better)")
    eps: Optional[Union[float, list[float]]] = Field(None, description="target of the metric (one per model, or one for all); none: no hitting times")
    hit_rule: Literal["simultaneous", "max_first_hit", "first_model"] = Field(
        "simultaneous", description="T_P: first round at which every model meets its target (A12), the last model's first hit, or model 0's")
    T1: Optional[float] = Field(None, gt=0, description="rounds single-model FedAvg needs (from a sequential run): the summary then gives the gain")
    tau1: Optional[float] = Field(None, gt=0, description="and the virtual seconds of those rounds summed over models (gain in time)")
    stop_at_target: bool = Field(False, description="end the run once T_P is reached")


class MultiModelParams(LocalWorkParams):
    assignment: Literal["mfa_rand", "mfa_rr", "sequential"] = Field(description="MFA-Rand, MFA-RR, or one model at a time")
    k: Optional[int] = Field(None, ge=1, description="clients per round (partial participation); none: every available client")
    rr_resample: Literal["frame", "round"] = Field("frame", description="MFA-RR: sample the K clients once per frame (A4) or every round")
    allow_unequal_groups: bool = Field(False, description="allow group sizes that differ by one when M does not divide K (A5)")
    rounds_per_model: Optional[int] = Field(None, ge=1, description="sequential: rounds of each model (default run.rounds / M)")
    init: Literal["auto", "zeros", "framework"] = Field("auto", description="start models at 0 (Alg. 1 line 1; auto: models declared StartsAtZero, quadratic and logreg) or at the framework init (A17)")
    wait: Wait = Field(default_factory=WaitAll, description="all | {mode: deadline, seconds}")
    gain: GainParams = Field(default_factory=GainParams, description="reading the gain off the run")

    @model_validator(mode="after")
    def _wait(self):
        if self.wait.mode == "first_k":
            raise ValueError("multi_model waits for all groups or a deadline (wait: first_k is not defined here)")
        return self

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        n, M = fleet.clients, fleet.models
        if self.k is not None and self.k > n:
            out.append((f"{at}.k", f"{self.k} clients per round, but clients.count is {n}"))
        if self.assignment in ("mfa_rand", "mfa_rr") and M > 1 and not self.allow_unequal_groups:
            K = self.k if self.k is not None else n           # equal groups (docs/algorithms/multimodel.md A5)
            if K % M:
                out.append((f"{at}.k" if self.k is not None else "clients.count",
                            f"{K} clients per round do not split into {M} equal groups (one per model); "
                            f"set {at}.allow_unequal_groups: true for sizes that differ by one"))
        return out


class MultiModel(Protocol):
    name = "multi_model"
    multi_model = True

    def __init__(self, world, params):
        super().__init__(world, params)
        M = len(world.tasks)
        self.M = M
        p = params
        if p.assignment == "mfa_rand":
            self.assigner = MfaRand(M, p.k, p.allow_unequal_groups or M == 1)
        elif p.assignment == "mfa_rr":
            self.assigner = MfaRR(M, p.k, p.allow_unequal_groups or M == 1, p.rr_resample)
        else:
            rounds = world.sc.run.rounds
            R = p.rounds_per_model or max(1, (rounds or M) // M)
            self.assigner = Sequential(M, R, p.k)
        self.rng = world.streams.generator("assignment")
        for task in world.tasks:                       # Alg. 1 line 1: models start at 0 (A17)
            if p.init == "zeros" or (p.init == "auto" and isinstance(task.net.module, StartsAtZero)):
                task.algorithm.start_from(torch.zeros_like(task.algorithm.global_params()))
        self.series = {m: ([], [], []) for m in range(M)}   # model -> evaluated (rounds, values, times)
        self.all_hit = None       # (T_P, virtual time) once every model met its target
        self.model_start = {}     # sequential: model -> (first round, virtual time it started)
        self.due = set()          # models an ended round assigned clients to (they must be aggregated)

    # -- the round --------------------------------------------------------------------------
    def process(self):
        def each(t):
            yield from self.round(t)
            return bool((self.p.gain.stop_at_target and self.all_hit is not None)
                        or (isinstance(self.assigner, Sequential) and self.assigner.active(t + 1) >= self.M))
        yield from self.run_rounds(each)

    def round(self, t: int):
        w, env = self.world, self.env
        start = env.now
        avail = self.available(t)
        groups = self.assigner.assign(t, avail, self.rng)
        busy = np.concatenate(groups) if groups else np.zeros(0, np.int64)
        idle = np.setdiff1d(np.arange(w.num_clients), busy)
        idle_log = w.recorder.idle_log(t, idle)
        idle_log.available[:] = np.isin(idle, avail)
        u0 = (t - 1) % self.M
        close = closing_time(env, self.p.wait.seconds) if self.p.wait.mode == "deadline" else None
        procs = []
        workers, steps = [], []
        for m, members in enumerate(groups):
            st = self.local_steps_of(w.tasks[m])
            workers += [int(c) for c in members]
            steps += [st(int(c)) for c in members]
        draws = self.round_draws(t, workers, steps)
        for m, members in enumerate(groups):
            if len(members):
                group = ((m - u0) % self.M) + 1 if self.p.assignment == "mfa_rr" else None
                procs.append(env.process(self.train_model(w.tasks[m], t, members, start, close, group, draws)))
        if procs:
            yield env.all_of(procs)
            self.due.update(m for m, g in enumerate(groups) if len(g))     # the round ended: each owes its aggregation
        else:                                  # nobody to train this round: time moves on
            w.rounds_done = max(w.rounds_done, t)
        self.check_targets(t)

    def train_model(self, task, t, members, start, close, group, draws=None):
        """One model's part of round t: its group trains it; it aggregates when the last
        member reports (or at the deadline)."""
        w, env = self.world, self.env
        log = w.recorder.round_log(t, task=task.index, ids=members)
        log.available[:] = True
        log.selected[:] = True
        if isinstance(self.assigner, Sequential) and task.index not in self.model_start:
            self.model_start[task.index] = (t, start)
        gate = Gate(env, len(members))
        bc = self.broadcast(task, t)
        sheet = self.open_sheet(log, task)
        call = Call(task, t, bc, sheet, draws, gate.arrive, gate.fail)
        parts = []
        steps = self.local_steps_of(task)
        for cid in members:
            c = w.clients[int(cid)]
            self.set_state(c, State.SELECTED, t, f"model {task.index}")
            parts.append(Driver(self.participate(call, c, steps(int(cid)))))
        self.start_participants(parts)
        if close is not None:
            yield gate.done | close
        else:
            yield gate.done
        items = yield from self.close_round(gate, parts)
        sheet.close(env.now)
        arrivals, agg = self.aggregate(task, t, items, log)
        extra = {"round_time": env.now - start, "model_time": env.now - start, "frame": (t - 1) // self.M + 1,
                 "u": (t - 1) % self.M + 1, "n_clients": len(members), "lr": task.algorithm.lr(t), **agg.round_cols}
        if group is not None:
            extra["group"] = group
        row = self.finish_aggregation(task, t, arrivals, log, extra)
        value = row.get(self.p.gain.metric)
        if value is not None and value == value:              # evaluated this round (not NaN)
            rs, vs, ts = self.series[task.index]
            rs.append(t)
            vs.append(value)
            ts.append(env.now)

    def local_steps_of(self, task):
        wl = self.world.sc.workload_list[task.index]
        if wl.local_steps is not None:
            return lambda cid: int(wl.local_steps)
        return lambda cid: self.local_steps(cid, task)

    def models_due(self) -> set:
        return set(self.due)

    # -- hitting times and the gain ------------------------------------------------------------
    def targets(self) -> Optional[list]:
        eps = self.p.gain.eps
        if eps is None:
            return None
        return [float(e) for e in eps] if isinstance(eps, list) else [float(eps)] * self.M

    def check_targets(self, t: int) -> None:
        eps = self.targets()
        if self.all_hit is not None or eps is None:
            return
        lower = G.lower_is_better(self.p.gain.metric)
        TP = G.joint_hit([s[:2] for s in self.series.values()], eps, self.p.gain.hit_rule, lower)
        if TP is not None:
            self.all_hit = (TP, self.time_of(TP))

    def time_of(self, r: int) -> Optional[float]:
        """Virtual time at the end of round r (its last model's aggregation)."""
        times = [ts[rs.index(r)] for rs, _, ts in self.series.values() if r in rs]
        return max(times) if times else None

    def summary(self) -> dict:
        g = self.p.gain
        eps = self.targets()
        lower = G.lower_is_better(g.metric)
        out = {"M": self.M, "assignment": self.p.assignment, "metric": g.metric, "eps": g.eps, "hit_rule": g.hit_rule,
               "T_P": None if self.all_hit is None else int(self.all_hit[0]),
               "tau_P": None if self.all_hit is None else float(self.all_hit[1])}
        hits = {}
        for m, (rs, vs, ts) in self.series.items():
            h = None if eps is None else G.first_hit(rs, vs, eps[m], lower)
            if h is not None:
                hits[m] = (h, ts[rs.index(h)])
        out["first_hit"] = {str(m): {"round": h, "virtual_time": tm} for m, (h, tm) in hits.items()}
        if isinstance(self.assigner, Sequential):      # each model's own T_1 and its virtual time
            out["rounds_per_model"] = R = self.assigner.rounds_per_model
            T1 = {str(m): h - m * R for m, (h, _) in hits.items()}
            tau1 = {str(m): tm - self.model_start[m][1] for m, (_, tm) in hits.items()}
            out.update(T1=T1, tau1=tau1)
            if len(T1) == self.M:
                out["T1_total"] = int(sum(T1.values()))
                out["tau1_total"] = float(sum(tau1.values()))
        if g.T1 is not None and self.all_hit is not None:
            out["gain"] = G.gain(self.M, g.T1, self.all_hit[0])                 # Eq. 3
            if g.tau1 is not None:
                out["gain_time"] = g.tau1 / self.all_hit[1]
        return {"multi_model": out}


register("protocol", "multi_model", MultiModelParams,
         "M models on one client pool: each participating client trains one model per round "
         "(MFA-Rand, MFA-RR, or the sequential baseline)", MultiModel)
