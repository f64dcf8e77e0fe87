"""Batched executor: many clients' local training as a few stacked tensor operations
(docs/architecture.md section 3, "Executor").

Jobs that share a model, a local-rule kind and a batch shape are stacked as one [J, dim]
parameter matrix, and each local step is one `vmap` over `grad` of `functional_call`.
It computes exactly what `SequentialExecutor` computes (same batches, same update rule):

- different step counts: jobs are sorted by steps, so at step h the jobs still running are
  a prefix of the stack and only that prefix is computed (finished jobs stop updating);
- different batch sizes (the last, partial batch of an epoch; full-batch clients of
  different sizes): batches are padded with weight-0 samples and the loss is the
  per-sample loss weighted by 1/|batch|, which is the unpadded mean;
- per-job learning-rate schedules, momentum, weight decay and prox coefficients are
  per-row scalars; prox anchors and correction vectors are stacked like the parameters.

- a rule's functional pieces (loss terms, per-sample and gradient transforms, training.py)
  run inside the same vmap (gradient.py); their named vectors are stacked too, and noise
  comes from each job's own keyed stream.

Probe jobs (one step plus two extra gradients), single-job groups and rule types that do
not declare `batchable` (a torch.optim optimizer, a user training function) take the
sequential path; summary.json's `executor_paths` says which path each job kind took and why.
Models with BatchNorm buffers are refused (`batched`) or run sequentially (`auto`): the
running statistics each job updates in place do not stack under `vmap`. `chunk` bounds how
many jobs one vmap stacks (memory grows with chunk x batch).
Indices of every step are built on the host once per chunk and copied to the device in
one transfer; data stay on the device.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch.func import functional_call, grad_and_value, vmap

from ..registry import register
from .executor import ExecutorParams, SequentialExecutor
from .sgd import sgd_step
from .gradient import PiecesGradient, draw_noise, noise_stream
from .jobs import TrainResult
from .lazy import force
from .loss_stats import StackAccumulator


class BatchedParams(ExecutorParams):
    chunk: int = Field(256, ge=1, description="most jobs stacked into one vmap (bounds memory)")


def group_key(job) -> tuple:
    """Jobs with the same key can be stacked: same model, rule kind and batch shape."""
    s = job.spec
    return (job.task, s.rule.key(), job.batch_size, s.correction is not None, tuple(sorted(s.vectors)))


def _stacked_grad(net, samples: bool = False):
    """vmap(grad): ([J,dim] params, [J,B,...] x, [J,B] y, [J,B] weights) -> ([J,dim] grads, [J] losses);
    with `samples`, ([J,dim] grads, ([J] losses, [J,B] per-sample losses))."""
    module, names, shapes, numels, kind = net.module, net.names, net.shapes, net.numels, net.loss

    def per_sample(w, x, y):
        views = {n: piece.reshape(s) for n, s, piece in zip(names, shapes, torch.split(w, numels))}
        out = functional_call(module, views, (x,))
        if kind == "direct":   # the model returns per-sample losses
            return out.reshape(out.shape[0], -1).mean(1) if out.dim() > 1 else out
        return F.cross_entropy(out, y, reduction="none")

    def loss(w, x, y, wt):
        return (per_sample(w, x, y) * wt).sum()

    def loss_and_samples(w, x, y, wt):
        per = per_sample(w, x, y)
        return (per * wt).sum(), per.detach()

    if samples:
        return vmap(grad_and_value(loss_and_samples, has_aux=True))
    return vmap(grad_and_value(loss))


class BatchedExecutor(SequentialExecutor):
    """Stacks jobs with `group_key` and runs their steps together (see module doc)."""

    name = "batched"
    params_type = BatchedParams
    #: declared: stacks every group of jobs, so it refuses models with BatchNorm buffers
    #: (they do not stack under vmap); `auto` runs their jobs on the loop instead
    stacks_all: ClassVar[bool] = True

    def __init__(self, tasks, streams, device, params=None, cpus=None):
        super().__init__(tasks, streams, device, params, cpus)
        self.chunk = self.params.chunk
        if self.stacks_all:
            stateful = sorted(i for i, td in tasks.items() if td.net.has_buffers)
            if stateful:
                from ..errors import ScenarioError
                raise ScenarioError([("executor.name", f"the batched executor cannot stack models with BatchNorm "
                                      f"buffers (model {stateful[0]} has them); use sequential or auto")])
        self._grad_fns = {}

    # -- scheduling -------------------------------------------------------------------
    STACK_WHY = "batched executor: jobs of one model, rule kind and batch shape stacked under torch.func.vmap"
    ALONE_WHY = "alone in its group (model, rule kind, batch shape): nothing to stack"

    def run(self, futures):
        groups: dict = {}
        loop, whys = [], []                 # jobs run one by one (on `workers` threads on a CPU)
        for fut in futures:
            why = self.loop_reason(fut.job)
            if why is None:
                groups.setdefault(group_key(fut.job), []).append(fut)
            else:
                loop.append(fut)
                whys.append(why)
        for futs in groups.values():
            why = self.refusal(futs)
            if why is None:
                self.run_stacked(futs)
            else:
                loop += futs
                whys += [why] * len(futs)
        if loop:
            self.run_loop(loop, whys)

    def loop_reason(self, job):
        """Why this job cannot be stacked, from its spec's declared type; None: it can."""
        if job.spec.probe:
            return "probe job (one step and two extra gradients): the sequential loop"
        if job.steps <= 0:
            return "no local steps: nothing to stack"
        if not job.spec.rule.batchable:
            return type(job.spec.rule).why_sequential
        if self.loss_stats and job.spec.rule.has_pieces:
            return "loss statistics with functional pieces: the sequential loop (compute/loss_stats.py)"
        return None

    def refusal(self, futs):
        """Why a group of stackable jobs is run on the loop; None: stack it (`auto` overrides this)."""
        return None if len(futs) > 1 else self.ALONE_WHY

    def stack_why(self) -> str:
        return self.STACK_WHY

    def run_stacked(self, futs):
        futs = sorted(futs, key=lambda f: -f.job.steps)   # running jobs = a prefix of the stack
        for i in range(0, len(futs), self.chunk):
            part = futs[i:i + self.chunk]
            if len(part) == 1:
                self.run_loop(part, ["alone in the last chunk of its group: nothing to stack"])
                continue
            results = self.train_stack([f.job for f in part])
            for fut, res in zip(part, results):
                self._count(fut.job, "batched", self.stack_why())
                fut._set(res)
                fut.job = None

    # -- the stacked loop ----------------------------------------------------------------
    def _host_rows(self, job) -> np.ndarray:
        rows = self.tasks[job.task].client_rows.host(job.client)
        return rows if job.rows is None else rows[np.asarray(job.rows, dtype=np.int64)]

    def _indices(self, jobs, S):
        """[S, J, B] global row indices (padding repeats a valid row), [S, J, B] sample
        weights (1/|batch|, 0 for padding and finished jobs), [S, J] batch sizes."""
        J = len(jobs)
        plans = [self.plan(j) for j in jobs]
        B = max(len(b) for p in plans for b in p)
        idx = np.zeros((S, J, B), dtype=np.int64)
        size = np.zeros((S, J), dtype=np.int64)
        for j, (job, plan) in enumerate(zip(jobs, plans)):
            rows = self._host_rows(job)
            full = None
            for h, b in enumerate(plan):
                n = len(b)
                if n == len(rows):
                    if full is None:
                        full = rows[b]
                    g = full
                else:
                    g = rows[b]
                idx[h, j, :n] = g
                idx[h, j, n:] = g[0]
                size[h, j] = n
        wt = (np.arange(B)[None, None, :] < size[:, :, None]) / np.maximum(size, 1)[:, :, None]
        return idx, wt, size, plans

    def train_stack(self, jobs) -> list:
        td = self.tasks[jobs[0].task]
        net, dev = td.net, self.device
        rule0 = jobs[0].spec.rule
        J = len(jobs)
        steps = np.array([j.steps for j in jobs])
        S = int(steps.max())
        W = torch.stack([force(j.spec.start).detach().to(dev) for j in jobs])
        fn = self._step_grad(jobs, W)
        dt = W.dtype
        col = lambda vals: torch.tensor(vals, dtype=dt, device=dev).unsqueeze(1)  # noqa: E731
        wd = col([j.spec.rule.weight_decay for j in jobs]) if rule0.weight_decay else None
        mu = col([j.spec.rule.prox_mu for j in jobs]) if rule0.prox_mu else None
        mom = col([j.spec.rule.momentum for j in jobs]) if rule0.momentum else None
        lr = torch.tensor([[j.spec.rule.lr_at(h) for j in jobs] for h in range(S)], dtype=dt, device=dev)
        anchor = None
        if mu is not None:
            anchor = torch.stack([W[i] if j.spec.anchor is None else force(j.spec.anchor).detach().to(dev)
                                  for i, j in enumerate(jobs)])
        corr = None
        if jobs[0].spec.correction is not None:
            corr = torch.stack([force(j.spec.correction).detach().to(dev) for j in jobs])
        want_g = any(j.spec.want_grad_mean for j in jobs)
        gsum = torch.zeros_like(W) if want_g else None
        lsum = torch.zeros(J, dtype=dt, device=dev)

        idx_np, wt_np, size, plans = self._indices(jobs, S)
        idx = torch.from_numpy(idx_np).to(dev)
        wt = torch.from_numpy(wt_np).to(device=dev, dtype=td.x.dtype)
        active = [int((steps > h).sum()) for h in range(S)]
        acc = self._loss_stats(jobs, plans) if self.loss_stats else None
        buf = None
        for h in range(S):
            k = active[h]
            Bh = int(size[h, :k].max())
            ib = idx[h, :k, :Bh]
            g, loss = fn(h, W[:k], td.x[ib], td.y[ib], wt[h, :k, :Bh], size[h, :k])
            if acc is not None:
                loss, per = loss
                acc.add(h, k, per, wt[h, :k, :Bh] > 0)
            self.stats.grad_evals += k
            lsum[:k] += loss.detach()
            if gsum is not None:
                gsum[:k] += g
            top = lambda v: None if v is None else v[:k]  # noqa: E731  the jobs still running
            W[:k], b = sgd_step(W[:k], g, top(buf), lr[h, :k, None], top(wd), top(mu), top(mom),
                                rule0.nesterov, top(anchor), top(corr))
            if buf is None:
                buf = b                  # created at step 0, when every job is running
        losses = lsum.tolist()
        ls = [None] * J if acc is None else acc.results()
        return [TrainResult(params=W[i].clone(), steps=int(steps[i]), loss_mean=losses[i] / int(steps[i]),
                            grad_mean=gsum[i] / int(steps[i]) if job.spec.want_grad_mean else None, loss_stats=ls[i])
                for i, job in enumerate(jobs)]

    def _loss_stats(self, jobs, plans) -> StackAccumulator:
        """The stacked jobs' loss statistics (compute/loss_stats.py), step by step."""
        return StackAccumulator(plans, [len(self._host_rows(j)) for j in jobs], [j.batch_size for j in jobs],
                                self.device)

    def _step_grad(self, jobs, W):
        """fn(h, W[:k], X, Y, WT, sizes) -> (G, losses) of step h for the k jobs still running:
        the model's vmapped gradient, or the rule's functional pieces (gradient.py) under vmap,
        with the jobs' start and named vectors stacked and each job's noise from its own stream."""
        task, rule = jobs[0].task, jobs[0].spec.rule
        net = self.tasks[task].net
        if not rule.has_pieces:
            key = (task, self.loss_stats)
            fn = self._grad_fns.get(key)
            if fn is None:
                fn = self._grad_fns[key] = _stacked_grad(net, self.loss_stats)
            return lambda h, w, x, y, wt, sizes: fn(w, x, y, wt)
        pg = PiecesGradient(net, rule)
        vmapped = pg.stacked()
        start = W.clone()
        vectors = {k: torch.stack([v[k] for v in map(self.spec_vectors, (j.spec for j in jobs))])
                   for k in jobs[0].spec.vectors}
        rngs = [noise_stream(self.streams, j) for j in jobs]

        def fn(h, w, x, y, wt, sizes):
            k = len(w)
            noises = ()
            if pg.noise_count:
                draws = [draw_noise(rngs[i], pg.noise_count, w.shape[1], w) for i in range(k)]
                noises = tuple(torch.stack([d[c] for d in draws]) for c in range(pg.noise_count))
            bsz = torch.as_tensor(sizes, dtype=w.dtype, device=w.device)
            return vmapped(w, x, y, wt.to(w.dtype), start[:k], {n: v[:k] for n, v in vectors.items()}, bsz,
                           noises, torch.tensor(h))

        return fn


class AutoParams(BatchedParams):
    min_jobs: int = Field(8, ge=2, description="CPU: stack a group only from this many jobs")
    max_step_macs: float = Field(2e6, gt=0, description="CPU: stack only if forward MACs x batch per job step <= this")


def auto_batches(device: torch.device, jobs: int, step_macs: float, p: AutoParams) -> bool:
    """The `auto` rule, from benchmarks/auto_rule.py (results/auto_rule.json: idle 2-core CPU,
    2 threads, 10 steps of batch 32; batched speed-up over the loop at 2 / 5 / 20 / 100 jobs):
    logreg 0.64 / 1.36 / 3.8 / 5.1, mlp 0.72 / 0.84 / 1.03 / 0.31, cnn_mnist 0.93 / 1.11 / 1.03 / 0.89.
    On a CPU batching pays only for small models (per-step Python overhead dominates), so
    stack from `min_jobs` jobs and at most `max_step_macs` multiply-accumulates per job step
    (logreg at batch 32: 2.5e5; mlp: 5.1e6 and cnn_mnist: 1.5e7 run as a loop). On a GPU
    stack every group of >= 2 jobs."""
    if jobs < 2:
        return False
    if device.type != "cpu":
        return True
    return jobs >= p.min_jobs and step_macs <= p.max_step_macs


class AutoExecutor(BatchedExecutor):
    """Per group of stackable jobs, batched or sequential by `auto_batches`."""

    name = "auto"
    params_type = AutoParams
    stacks_all = False           # BatchNorm models' jobs go to the loop (`refusal`)

    def __init__(self, tasks, streams, device, params=None, cpus=None):
        super().__init__(tasks, streams, device, params, cpus)
        self.rule = self.params
        self._macs = {}

    def stack_why(self) -> str:
        return "auto: stacking pays here (a GPU, or at least min_jobs small jobs on a CPU)"

    def refusal(self, futs):
        job = futs[0].job
        td = self.tasks[job.task]
        if td.net.has_buffers:
            return "the model has BatchNorm buffers (they do not stack under vmap)"
        if job.task not in self._macs:
            from ..workloads.models import forward_macs      # runs in the module's dtype and device
            self._macs[job.task] = max(forward_macs(td.net.module, tuple(td.x.shape[1:])), td.net.dim)
        batch = max(len(self.job_rows(f.job)) if f.job.batch_size is None else f.job.batch_size for f in futs)
        if auto_batches(self.device, len(futs), self._macs[job.task] * batch, self.rule):
            return None
        if len(futs) < 2:
            return self.ALONE_WHY
        return "auto: on a CPU the loop is faster (fewer than min_jobs jobs, or over max_step_macs per job step)"


register("executor", "batched", BatchedParams,
         "stacks jobs of one model and local rule and runs their steps together (torch.func.vmap); "
         "same results as sequential", BatchedExecutor)
register("executor", "auto", AutoParams,
         "per group of jobs, batched or sequential from the model size, job count and device; on a CPU "
         "the jobs it does not stack train on `workers` threads at once", AutoExecutor)
