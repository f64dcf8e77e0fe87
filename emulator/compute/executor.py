"""Executors: where real compute happens (DESIGN.md section 3, "Executor").

`submit(job)` returns a `JobFuture` at once; nothing is computed until a value that needs
the job is read (`lazy.resolve`), then `run(futures)` computes a whole level of needed jobs
together. `SequentialExecutor` is the reference semantics: a plain loop over jobs and steps.
"""
from __future__ import annotations

import re

from dataclasses import dataclass, replace
from typing import Literal, Optional

import numpy as np
import torch
from pydantic import Field, field_validator

from ..registry import Params, register
from .batches import batch_plan
from .flat import FlatModel
from .jobs import PROBE_KEY, JobFuture, LocalRule, TrainJob, TrainResult, probe_estimates
from .lazy import force


class ClientRows:
    """Each client's row numbers into a task's x / y as a LongTensor on the device, made on
    first use (a 10^6-client fleet pays only for the clients that train)."""

    def __init__(self, indices, device):
        self.indices, self.device = indices, device
        self._made: dict = {}

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, client):
        t = self._made.get(client)
        if t is None:
            t = self._made[client] = torch.as_tensor(np.asarray(self.indices[client]), dtype=torch.long,
                                                     device=self.device)
        return t

    def __iter__(self):
        return (self[c] for c in range(len(self)))

    def host(self, client) -> np.ndarray:
        return np.asarray(self.indices[client], dtype=np.int64)


@dataclass
class TaskData:
    """What an executor needs of one model's workload: the flat model and the data on device."""

    net: FlatModel
    x: torch.Tensor
    y: torch.Tensor
    client_rows: "ClientRows"    # per client: LongTensor of rows into x / y (on device), made lazily


@dataclass
class ExecutorStats:
    jobs_submitted: int = 0
    steps_submitted: int = 0
    jobs_computed: int = 0
    steps_computed: int = 0
    grad_evals: int = 0          # real gradient computations of local steps (a probe's own step included)
    probe_evals: int = 0         # extra gradients of probes (tsfl.md 3.4), not local steps


class Executor:
    name = "?"

    def __init__(self, tasks: dict, streams, device: torch.device, params=None):
        self.tasks = tasks
        self.streams = streams
        self.device = device
        self.params = params          # the scenario's executor block (None: defaults)
        self.stats = ExecutorStats()

    def submit(self, job: TrainJob) -> JobFuture:
        """A future for `job`. A spec asking for probes is split: the training job itself
        (no probe) and a one-step probe job on the same batches (its first batch is the
        training's first batch), read through `future.probe`."""
        self.stats.jobs_submitted += 1
        self.stats.steps_submitted += job.steps
        probe = None
        if job.spec.probe:
            if job.steps > 0:
                probe = JobFuture(replace(job, steps=1), self)
            job = replace(job, spec=replace(job.spec, probe=False))
        return JobFuture(job, self, probe)

    def run(self, futures: list) -> None:
        """Compute these jobs (every lazy input of theirs is already resolved)."""
        raise NotImplementedError

    # helpers shared by executors -------------------------------------------------
    def job_rows(self, job: TrainJob) -> torch.Tensor:
        """Rows into the task's x / y that this job may train on."""
        rows = self.tasks[job.task].client_rows[job.client]
        if job.rows is None:
            return rows
        return rows[torch.as_tensor(np.asarray(job.rows, dtype=np.int64), device=rows.device)]

    def plan(self, job: TrainJob) -> list:
        """The job's mini-batches, as local row numbers into `job_rows(job)`."""
        n = len(self.job_rows(job))
        rng = self.streams.keyed("batches", job.client, job.round, job.task, job.tag)
        return batch_plan(n, job.steps, job.batch_size, rng)

    def probe_batch(self, job: TrainJob) -> np.ndarray:
        """The probe's independent batch g_b (tsfl.md 3.4), from its own keyed stream."""
        n = len(self.job_rows(job))
        rng = self.streams.keyed("batches", job.client, job.round, job.task, job.tag, PROBE_KEY)
        return batch_plan(n, 1, job.batch_size, rng)[0]

    def _count(self, job: TrainJob):
        if job.spec.probe:
            # a probe job (see submit) is its client's first step run again on the side:
            # extra gradients, not one of the local steps the fleet performed
            self.stats.probe_evals += job.steps
            return
        self.stats.jobs_computed += 1
        self.stats.steps_computed += job.steps


def sgd_step(w, g, buf, lr, weight_decay=None, prox_mu=None, momentum=None, nesterov=False,
             anchor=None, correction=None):
    """One local SGD step (PyTorch semantics) on flat vectors, or on a stack of them with
    per-row coefficients (columns [J, 1]); a coefficient of None is off. Returns (w, buf);
    `buf` (the momentum buffer) is updated in place once it exists."""
    if weight_decay is not None:
        g = g + weight_decay * w
    if prox_mu is not None:
        g = g + prox_mu * (w - anchor)
    if correction is not None:
        g = g + correction
    if momentum is not None:
        buf = g.clone() if buf is None else buf.mul_(momentum).add_(g)
        d = g + momentum * buf if nesterov else buf
    else:
        d = g
    return w - lr * d, buf


def sgd_update(w, g, buf, rule: LocalRule, h: int, anchor, correction):
    """One local step of `rule` (see LocalRule), on flat vectors. Returns (w, buf)."""
    return sgd_step(w, g, buf, rule.lr_at(h), rule.weight_decay or None, rule.prox_mu or None,
                    rule.momentum or None, rule.nesterov, anchor, correction)


class SequentialExecutor(Executor):
    """The reference: one job after another, one step after another."""

    name = "sequential"

    def run(self, futures):
        for fut in futures:
            fut._set(self.train(fut.job))
            self._count(fut.job)
            fut.job = None  # free start / anchor / correction references

    def train(self, job: TrainJob) -> TrainResult:
        td = self.tasks[job.task]
        spec, rule = job.spec, job.spec.rule
        w = force(spec.start).detach().to(self.device).clone()
        anchor = None
        if rule.prox_mu:
            anchor = w.clone() if spec.anchor is None else force(spec.anchor).detach()
        corr = None if spec.correction is None else force(spec.correction).detach()
        bufs = None if spec.buffers is None else force(spec.buffers).detach().to(self.device).clone()
        rows = self.job_rows(job)
        plan = self.plan(job)
        buf = None
        gsum = torch.zeros_like(w) if spec.want_grad_mean else None
        lsum = torch.zeros((), dtype=w.dtype, device=w.device)
        full = None
        for h, b in enumerate(plan):
            if len(b) == len(rows):
                if full is None:
                    full = (td.x[rows], td.y[rows])
                xb, yb = full
            else:
                idx = rows[torch.from_numpy(b).to(rows.device)]
                xb, yb = td.x[idx], td.y[idx]
            loss, g = td.net.loss_and_grad(w, xb, yb, bufs)     # BatchNorm: updates bufs in place
            self.stats.grad_evals += 1
            lsum += loss
            if gsum is not None:
                gsum += g
            if h == 0 and spec.probe:
                probe = self._probe(td, job, rows, w, g, xb, yb, rule.lr_at(0), spec.buffers)
            w, buf = sgd_update(w, g, buf, rule, h, anchor, corr)
        n = len(plan)
        return TrainResult(params=w, steps=n,
                           loss_mean=float(lsum) / n if n else float("nan"),
                           grad_mean=(gsum / n if (gsum is not None and n) else gsum),
                           probe=probe if (spec.probe and n) else None, buffers=bufs)

    def _probe(self, td, job, rows, w, ga, xa, ya, lr, buffers) -> dict:
        """tsfl.md 3.4: g_b on an independent batch at w, g_c on batch a at w - lr g_a."""
        idx = rows[torch.from_numpy(self.probe_batch(job)).to(rows.device)]
        gb = self._grad(td, w, td.x[idx], td.y[idx], buffers)
        gc = self._grad(td, w - lr * ga, xa, ya, buffers)
        self.stats.probe_evals += 2
        return {**probe_estimates(ga, gb, gc, lr), "batch": int(len(ya))}   # batch: for sigma2_unit

    @staticmethod
    def _grad(td, w, xb, yb, buffers=None):
        """A gradient on the side (probes): BatchNorm statistics are updated on a throwaway copy."""
        bufs = None if buffers is None else force(buffers).detach().clone()
        return td.net.loss_and_grad(w.detach(), xb, yb, bufs)[1]


class ExecutorParams(Params):
    device: str = Field("auto", description="auto | cpu | cuda[:n]")
    threads: Optional[int] = Field(None, ge=1, description="torch CPU threads (default: torch's own)")
    dtype: Literal["float32", "float64"] = Field("float32", description="precision of parameters and data")

    @field_validator("device")
    @classmethod
    def _device(cls, v):
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError("must be auto, cpu, cuda or cuda:<n>")
        return v


class SequentialParams(ExecutorParams):
    pass


register("executor", "sequential", SequentialParams,
         "reference executor: a plain loop over jobs and local steps", SequentialExecutor)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        from ..errors import ScenarioError
        raise ScenarioError([("executor.device", f"{name!r} asked for, but no CUDA device is available; use auto or cpu")])
    return torch.device(name)
