"""Loss statistics taken by the training job itself (compute/loss_stats.py): on the sequential
and the batched executor they equal a direct recomputation of every step's per-sample losses
(count, sum, sum of squares, unique samples, last batch, first-epoch EMA), and asking for them
changes no trained bit; jobs that nobody asked statistics of carry none."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from emulator.compute.batched import BatchedExecutor
from emulator.compute.executor import SequentialExecutor
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import force, resolve
from emulator.compute.pieces import ClipNorm
from emulator.workloads import models

from conftest import executor_on_random_data

CTX = models.ModelContext((1, 8, 8), 10)
SIZES = [30, 45, 23, 52]          # batch 8: partial last batches
STEPS = [7, 3, 9, 5]
LR = 0.1


def make(cls, stats: bool, model="mlp"):
    torch.manual_seed(0)
    build = {"mlp": lambda: models.mlp(models.MlpParams(hidden=16), CTX), "logreg": lambda: models.logreg(models.LogRegParams(), CTX)}
    net = FlatModel(build[model](), torch.device("cpu"), torch.float64)
    ex = executor_on_random_data(cls, net, CTX.input_shape, SIZES)
    ex.loss_stats = stats
    return ex, net


def train(ex, net, rule=None):
    x0 = net.initial_vector()
    futs = [ex.submit(TrainJob(0, c, 1, STEPS[c], LocalSpec(start=x0, rule=rule or LocalRule(lr=LR)), 8))
            for c in range(len(SIZES))]
    resolve(futs)
    return [force(f) for f in futs], [TrainJob(0, c, 1, STEPS[c], None, 8) for c in range(len(SIZES))]


def direct(ex, net, job):
    """Every step's per-sample losses by hand: plain SGD on the job's own batch plan."""
    td = ex.tasks[0]
    rows = td.client_rows[job.client]
    plan = ex.plan(job)
    w = net.initial_vector().clone()
    pers = []
    for b in plan:
        xb, yb = td.x[rows[torch.from_numpy(b)]], td.y[rows[torch.from_numpy(b)]]
        v = w.detach().requires_grad_(True)
        per = F.cross_entropy(net.forward(v, xb), yb, reduction="none")
        (g,) = torch.autograd.grad(per.mean(), v)
        pers.append(per.detach().double())
        w = w - LR * g
    cat = torch.cat(pers)
    epoch = math.ceil(len(rows) / 8)
    ema = None
    for h, p in enumerate(pers[:epoch]):
        m = float((p * p).mean())
        ema = m if h == 0 else 0.8 * ema + 0.2 * m
    return dict(n=len(cat), s1=float(cat.sum()), s2=float((cat * cat).sum()),
                unique=len(np.unique(np.concatenate(plan))), last_n=len(pers[-1]),
                last_s2=float((pers[-1] ** 2).sum()), ema_s2=ema)


@pytest.mark.parametrize("cls", [SequentialExecutor, BatchedExecutor])
def test_statistics_equal_a_direct_recomputation(cls):
    ex, net = make(cls, True)
    results, jobs = train(ex, net)
    for res, job in zip(results, jobs):
        want = direct(ex, net, job)
        s = res.loss_stats
        assert (s.n, s.unique, s.last_n) == (want["n"], want["unique"], want["last_n"])
        for k in ("s1", "s2", "last_s2", "ema_s2"):
            assert getattr(s, k) == pytest.approx(want[k], rel=1e-10), k
        assert s.unique < SIZES[job.client] or STEPS[job.client] * 8 >= SIZES[job.client]


@pytest.mark.parametrize("cls", [SequentialExecutor, BatchedExecutor])
def test_asking_for_statistics_changes_no_trained_bit(cls):
    on, net = make(cls, True)
    off, _ = make(cls, False)
    with_stats, _ = train(on, net)
    without, _ = train(off, net)
    for a, b in zip(with_stats, without):
        assert torch.equal(a.params, b.params) and a.loss_mean == b.loss_mean
        assert a.loss_stats is not None and b.loss_stats is None


def test_functional_pieces_take_their_statistics_on_the_loop():
    """A rule with pieces (gradient clipping) and statistics runs on the sequential loop in
    the batched executor, with the same statistics as the sequential executor's."""
    rule = LocalRule(lr=LR, transforms=(ClipNorm(1.0),))
    b, net = make(BatchedExecutor, True, "logreg")
    s, _ = make(SequentialExecutor, True, "logreg")
    rb, _ = train(b, net, rule)
    rs, _ = train(s, net, rule)
    for x, y in zip(rb, rs):
        assert x.loss_stats == y.loss_stats and torch.equal(x.params, y.params)
    seq = b.paths.summary({0: "fedavg"})["fedavg/local_sgd+ClipNorm"]["sequential"]
    assert seq["jobs"] == 4 and any("loss statistics with functional pieces" in w for w in seq["why"])
