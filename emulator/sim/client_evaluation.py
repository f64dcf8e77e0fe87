"""Per-client evaluation in a run (docs/fairness.md): with every global evaluation, the
clients to evaluate (all with local test rows, or a sample drawn from the `evaluation`
stream), one batched evaluation of them (workloads/evaluate.py: `PerClientEval`), their rows
for client_eval.csv, the metrics columns (emulator/measures/fairness.py) and, with `charge: true`,
the seconds their forward passes take on their devices."""
from __future__ import annotations

import math

import numpy as np
import torch

from ..measures import fairness
from ..workloads.evaluate import PerClientEval


class ClientEvaluation:
    """The run's per-client evaluation: one `PerClientEval` per model; evaluation k of model
    m is its (k+1)-th global evaluation (0: the initial model)."""

    def __init__(self, world, spec):
        self.world, self.spec = world, spec
        self.group_names = [g.name for g in world.groups]
        self.group_of = world.clients.group_names()
        self.count: dict = {}
        self.evals = {}
        for t in world.tasks:
            d = t.data
            x, y = (d.x_train, d.y_train) if t.local.source == "train" else (d.x_test, d.y_test)
            self.evals[t.index] = PerClientEval(t.net, torch.as_tensor(x, device=world.device, dtype=world.dtype),
                                                torch.as_tensor(y, device=world.device), t.local)

    def pick(self, task, round_: int) -> np.ndarray:
        """The clients evaluated now: those with local test rows, or `clients: n` of them drawn
        (without replacement) from the stream keyed by (model, round)."""
        have = np.flatnonzero(self.evals[task.index].sizes > 0)
        n = self.spec.clients
        if n == "all" or n >= len(have):
            return have
        rng = self.world.streams.keyed("evaluation", task.index, round_)
        return np.sort(rng.choice(have, size=n, replace=False))

    def run(self, task, round_: int, log=None) -> dict:
        """Evaluate the clients of this evaluation on the global model now: record their rows,
        charge their seconds (`charge: true`, a round's log given), return the metrics columns."""
        w = self.world
        k = self.count.get(task.index, 0)
        self.count[task.index] = k + 1
        clients = self.pick(task, round_)
        n, loss, acc = self.evals[task.index](task.algorithm.global_params(), clients, task.buffers)
        groups = self.group_of[clients]
        rows = {"evaluation": np.full(len(clients), k, np.int64), "round": np.full(len(clients), round_, np.int64),
                "virtual_time": np.full(len(clients), w.env.now), "client": clients, "group": groups,
                "n": n, "loss": loss, "acc": acc}
        w.recorder.client_eval(rows, task.index)
        if self.spec.charge and log is not None:
            self.charge(task, round_, clients, n, log)
        return fairness.client_columns(acc, n, groups, self.group_names)

    def seconds(self, task, round_: int, clients, n) -> np.ndarray:
        """Each client's forward passes on its device: one step of its compute model's clock
        (this round's, from now) per batch of its training batch size, ceil(n_i / b_i) steps."""
        now = self.world.env.now
        out = np.empty(len(clients))
        for j, (cid, m) in enumerate(zip(clients.tolist(), n.tolist())):
            c = self.world.clients[cid]
            out[j] = c.eval_clock(round_, now, task.index).time(math.ceil(m / c.work[task.index].batch))
        return out

    def charge(self, task, round_: int, clients, n, log) -> None:
        """clients.csv `eval_time` of the evaluated clients with a row in the round's log, and
        the protocol holds the next round until the slowest has finished."""
        secs = self.seconds(task, round_, clients, n)
        col = log.extra.get("eval_time")
        if col is None:
            col = log.extra["eval_time"] = np.zeros(log.n)
        row = np.ones(len(clients), bool) if log.ids is None else np.isin(clients, log.ids)
        col[log.positions(clients[row])] = secs[row]
        slowest = float(secs.max()) if len(secs) else 0.0
        if not math.isfinite(slowest):
            bad = int(clients[~np.isfinite(secs)][0])
            self.world.stall(f"a charged evaluation never ends: client {bad}'s compute model gives it no steps in "
                             f"round {round_} (evaluation.charge)")
            return
        p = self.world.protocol
        p.evaluation_wait = max(p.evaluation_wait, slowest)
