"""Executors: where real compute happens (docs/architecture.md section 3, "Executor").

`submit(job)` returns a `JobFuture` at once; nothing is computed until a value that needs
the job is read (`lazy.resolve`), then `run(futures)` computes a whole level of needed jobs
together. `SequentialExecutor` is the reference semantics: a plain loop over jobs and steps.

On a CPU it trains `workers` clients at once, each on its own Python thread with `threads`
torch threads (`JobThreads`; by default one thread, and as many workers as the run has
cores: compute/threads.py says why). A job trains on `threads` torch threads whether it ran
alone or beside others, so a run's numbers depend on `threads`, never on `workers`.
Each job computes exactly what the loop computes (its own batches, its own vectors); each
worker runs its own replica of the module, since `functional_call` swaps a module's
parameters while it runs.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import ClassVar, Literal, Optional

import numpy as np
import torch
from pydantic import Field, field_validator

from ..registry import Params, extension_point, register
from .batches import batch_plan
from .flat import FlatModel
from .gradient import PiecesGradient, noise_stream
from .jobs import (PROBE_KEY, CohortFuture, CohortJob, CohortResult, JobFuture, TrainJob, TrainResult,
                   probe_estimates)
from .lazy import force
from .loss_stats import LossAccumulator
from .paths import PROBE_KIND, PathLog
from .sgd import SgdSteps
from .threads import JobThreads, default_workers
from .training import ClientTraining, LocalRule, OptimizerRule, TrainFunction
from .user_training import JobBatches, OptimizerSteps, train_function


class ExecutorParams(Params):
    device: str = Field("auto", description="auto | cpu | cuda[:n]")
    threads: int = Field(1, ge=1, description="torch CPU threads of each job and of evaluation: a run's numbers "
                         "depend on it (default 1: fast on a busy machine too, docs/performance.md)")
    workers: Optional[int] = Field(None, ge=1, description="CPU: clients trained at once, each on its own Python "
                                   "thread with `threads` torch threads (default: the run's cores / threads)")
    dtype: Literal["float32", "float64"] = Field("float32", description="precision of parameters and data")

    @field_validator("device")
    @classmethod
    def _device(cls, v):
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError("must be auto, cpu, cuda or cuda:<n>")
        return v


class SequentialParams(ExecutorParams):
    pass


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
    client_rows: ClientRows      # per client: LongTensor of rows into x / y (on device), made lazily

    def __post_init__(self):
        if not isinstance(self.client_rows, ClientRows):
            raise TypeError(f"TaskData.client_rows must be a ClientRows, not {type(self.client_rows).__name__}")


@dataclass
class ExecutorStats:
    jobs_submitted: int = 0
    steps_submitted: int = 0
    jobs_computed: int = 0
    steps_computed: int = 0
    grad_evals: int = 0          # real gradient computations of local steps (a probe's own step included)
    probe_evals: int = 0         # extra gradients of probes (docs/algorithms/tsfl.md 3.4), not local steps
    loss_probe_rows: int = 0     # rows a selector's loss probes read (compute/loss_probe.py)


class Executor(ABC):
    """Where real compute happens. Required: `run` (abstract: compute a level of jobs whose
    inputs are resolved); `submit`, `submit_cohort`, `run_all` and the helpers are shared.
    Declares `params_type`, the options it reads."""

    name = "?"
    #: the options this executor reads (the Params it is registered with, or a base of it);
    #: an executor given none runs on this class's defaults
    params_type: ClassVar[type[ExecutorParams]] = ExecutorParams

    def __init__(self, tasks: dict, streams, device: torch.device, params: Optional[ExecutorParams] = None,
                 cpus: Optional[int] = None):
        """`cpus`: the cores this run may use (default: torch's thread count, i.e. OMP_NUM_THREADS
        or the machine's cores); `workers` defaults from it (compute/threads.py)."""
        self.tasks = tasks
        self.streams = streams
        self.device = device
        if params is None:
            params = self.params_type()
        elif not isinstance(params, self.params_type):
            raise TypeError(f"{type(self).__name__} reads {self.params_type.__name__}, "
                            f"not {type(params).__name__}")
        self.params = params          # the scenario's executor block
        self.cpus = int(cpus) if cpus is not None else torch.get_num_threads()
        self.stats = ExecutorStats()
        #: every job also takes its loss statistics (compute/loss_stats.py): set when a selector reads them
        self.loss_stats = False
        self.paths = PathLog()        # which path each job kind took, and why (summary.json)

    def submit(self, job: TrainJob) -> JobFuture:
        """A future for `job`. A spec asking for probes is split: the training job itself
        (no probe) and a one-step probe job on the same batches (its first batch is the
        training's first batch), read through `future.probe`."""
        rule = job.spec.rule
        if not isinstance(rule, ClientTraining):
            raise TypeError(f"LocalSpec.rule must be a ClientTraining (compute/training.py), not {type(rule).__name__}")
        if job.spec.probe and not isinstance(rule, LocalRule):
            raise ValueError("gradient probes need a LocalRule (their g_c step uses its learning rate)")
        self.stats.jobs_submitted += 1
        self.stats.steps_submitted += job.steps
        probe = None
        if job.spec.probe:
            if job.steps > 0:
                probe = JobFuture(replace(job, steps=1), self)
            job = replace(job, spec=replace(job.spec, probe=False))
        return JobFuture(job, self, probe)

    def submit_cohort(self, job: CohortJob, counted: bool = False) -> CohortFuture:
        """One future for a round's clients that share a spec (no probes, no BatchNorm
        buffers): counted as its clients' jobs, unless they were already (`count_jobs`, as
        each started computing)."""
        if job.spec.probe or job.spec.buffers is not None:
            raise ValueError("a cohort takes no probes and no BatchNorm buffers (submit per client)")
        if not counted:
            self.count_jobs(len(job.clients), int(job.steps.sum()))
        return CohortFuture(job, self)

    def count_jobs(self, jobs: int, steps: int) -> None:
        """Jobs that a cohort will carry, counted when they start (so a run that ends before
        the cohort is submitted counts them as the client-by-client path does)."""
        self.stats.jobs_submitted += jobs
        self.stats.steps_submitted += steps

    @abstractmethod
    def run(self, futures: list) -> None:
        """Required. Compute these jobs (every lazy input of theirs is already resolved): set
        each future's value (`fut._set(TrainResult)`)."""

    def run_all(self, futures: list) -> None:
        """Compute a level of needed futures: cohorts are run as their clients' jobs, together
        with the single jobs in one `run` (so a batched executor stacks them all)."""
        self.prepare_rows(futures)
        cohorts = [f for f in futures if isinstance(f, CohortFuture)]
        if not cohorts:
            self.run(futures)
            return
        inner = [[JobFuture(j, self) for j in f.job.jobs()] for f in cohorts]
        self.run([f for f in futures if not isinstance(f, CohortFuture)] + [g for fs in inner for g in fs])
        for f, fs in zip(cohorts, inner):
            self.finish_cohort(f, [g.value() for g in fs])

    @staticmethod
    def finish_cohort(fut: CohortFuture, results: list) -> None:
        """Set a cohort's value from its clients' results (in its rows' order)."""
        fut._set(CohortResult(params=[r.params for r in results],
                              steps=np.array([r.steps for r in results], dtype=np.int64),
                              loss_mean=np.array([r.loss_mean for r in results], dtype=np.float64),
                              loss_stats=[r.loss_stats for r in results]))
        fut.job = None

    def prepare_rows(self, futures: list) -> None:
        """Make these jobs' clients' rows here, before any worker starts: a keyed data set
        generates a device's rows when first asked (workloads/keyed.py), growing its pool."""
        for f in futures:
            rows = self.tasks[f.job.task].client_rows
            for c in (f.job.clients if isinstance(f, CohortFuture) else (f.job.client,)):
                rows[int(c)]

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
        """The probe's independent batch g_b (docs/algorithms/tsfl.md 3.4), from its own keyed stream."""
        n = len(self.job_rows(job))
        rng = self.streams.keyed("batches", job.client, job.round, job.task, job.tag, PROBE_KEY)
        return batch_plan(n, 1, job.batch_size, rng)[0]

    def spec_vectors(self, spec) -> dict:
        """The spec's named vectors as tensors on the device."""
        return {k: force(v).detach().to(self.device) for k, v in spec.vectors.items()}

    def _count(self, job: TrainJob, path: str, why: str):
        if job.spec.probe:
            # a probe job (see submit) is its client's first step run again on the side:
            # extra gradients, not one of the local steps the fleet performed
            self.stats.probe_evals += job.steps
            self.paths.note(job.task, PROBE_KIND, path, why, job.steps)
            return
        self.stats.jobs_computed += 1
        self.stats.steps_computed += job.steps
        self.paths.note(job.task, job.spec.rule.kind(), path, why, job.steps)


class SequentialExecutor(Executor):
    """The reference: one job after another, one step after another (on a CPU, `workers` jobs
    at once on their own threads, each computed exactly as the loop computes it)."""

    name = "sequential"
    params_type = SequentialParams
    #: why a job ran on the loop (summary.json executor_paths)
    LOOP_WHY = "sequential executor: one job after another"

    def __init__(self, tasks, streams, device, params=None, cpus=None):
        super().__init__(tasks, streams, device, params, cpus)
        w = self.params.workers
        self.workers = w if w is not None else self.default_workers()
        self._threads = (JobThreads(self.workers, self.params.threads)
                         if self.workers > 1 and device.type == "cpu" else None)

    def default_workers(self) -> int:
        """Clients trained at once when the scenario does not say: the run's cores / `threads`
        on a CPU, 1 on a GPU (compute/threads.py)."""
        return default_workers(self.cpus, self.params.threads) if self.device.type == "cpu" else 1

    def run(self, futures):
        self.run_loop(futures, [self.LOOP_WHY] * len(futures))

    def run_loop(self, futures, whys):
        """Compute these jobs one by one (on `workers` threads on a CPU); `whys[i]`: why job i
        is on the loop."""
        jobs = [fut.job for fut in futures]
        if self._threads is not None and jobs:
            results = self._threads.map(self.train, jobs, self.tasks)
        else:
            results = [self.train(job) for job in jobs]
        for fut, job, res, why in zip(futures, jobs, results, whys):
            self.stats.grad_evals += res.steps
            if res.probe is not None:
                self.stats.probe_evals += 2          # g_b and g_c (docs/algorithms/tsfl.md 3.4)
            self._count(job, "sequential", why)
            fut._set(res)
            fut.job = None  # free start / anchor / correction references

    @staticmethod
    def batches(td: TaskData, rows, plan):
        """(x, y) of each planned mini-batch (a full batch is gathered once)."""
        full = None
        for b in plan:
            if len(b) == len(rows):
                if full is None:
                    full = (td.x[rows], td.y[rows])
                yield full
            else:
                idx = rows[torch.from_numpy(b).to(rows.device)]
                yield td.x[idx], td.y[idx]

    def train(self, job: TrainJob, net: Optional[FlatModel] = None) -> TrainResult:
        """One job, step after step. `net`: the module replica to run (default: the task's)."""
        td = self.tasks[job.task]
        net = net or td.net
        spec, rule = job.spec, job.spec.rule
        w = force(spec.start).detach().to(self.device).clone()
        bufs = None if spec.buffers is None else force(spec.buffers).detach().to(self.device).clone()
        rows = self.job_rows(job)
        plan = self.plan(job)
        if isinstance(rule, TrainFunction):
            at = lambda b: next(self.batches(td, rows, [b]))  # noqa: E731
            params, bufs, loss = train_function(self, job, net, w, bufs, JobBatches(at, plan))
            return TrainResult(params=params, steps=len(plan), loss_mean=loss, buffers=bufs)
        step = self.stepper(rule, spec, net, w)
        stats = LossAccumulator(plan, len(rows), job.batch_size, w.device) if self.loss_stats else None
        grad = self.gradient(job, net, w, bufs, samples=stats is not None)
        gsum = torch.zeros_like(w) if spec.want_grad_mean else None
        lsum = torch.zeros((), dtype=w.dtype, device=w.device)
        for h, (xb, yb) in enumerate(self.batches(td, rows, plan)):
            if stats is None:
                loss, g = grad(w, xb, yb, h)
            else:
                loss, g, per = grad(w, xb, yb, h)
                stats.add(h, per)
            lsum += loss
            if gsum is not None:
                gsum += g
            if h == 0 and spec.probe:
                probe = self._probe(td, net, job, rows, w, g, xb, yb, rule.lr_at(0), spec.buffers)
            w = step(w, g, h)
        n = len(plan)
        return TrainResult(params=w, steps=n,
                           loss_mean=float(lsum) / n if n else float("nan"),
                           grad_mean=(gsum / n if (gsum is not None and n) else gsum),
                           probe=probe if (spec.probe and n) else None, buffers=bufs,
                           loss_stats=None if stats is None else stats.result())

    @staticmethod
    def stepper(rule, spec, net, w):
        """The update of one local step, from the rule's type."""
        if isinstance(rule, OptimizerRule):
            return OptimizerSteps(rule, net, w)
        anchor = None
        if rule.prox_mu:
            anchor = w.clone() if spec.anchor is None else force(spec.anchor).detach()
        corr = None if spec.correction is None else force(spec.correction).detach()
        return SgdSteps(rule, anchor, corr)

    def gradient(self, job, net, w, bufs, samples: bool = False):
        """grad(w, xb, yb, h) -> (loss, g): the model's own gradient (BatchNorm: updates bufs in
        place), or the rule's functional pieces (gradient.py); with `samples`, (loss, g,
        per-sample losses)."""
        rule = job.spec.rule
        if not rule.has_pieces:
            if bufs is None:
                return lambda w, xb, yb, h: net.step_loss_and_grad(w, xb, yb, samples=samples)
            return lambda w, xb, yb, h: net.loss_and_grad(w, xb, yb, bufs, samples=samples)
        pg, start = PiecesGradient(net, rule), w.clone()
        vectors, rng = self.spec_vectors(job.spec), noise_stream(self.streams, job)
        return lambda w, xb, yb, h: pg.sequential(w, xb, yb, h, start, vectors, bufs, rng, samples)

    def _probe(self, td, net, job, rows, w, ga, xa, ya, lr, buffers) -> dict:
        """docs/algorithms/tsfl.md 3.4: g_b on an independent batch at w, g_c on batch a at w - lr g_a."""
        idx = rows[torch.from_numpy(self.probe_batch(job)).to(rows.device)]
        gb = self._grad(net, w, td.x[idx], td.y[idx], buffers)
        gc = self._grad(net, w - lr * ga, xa, ya, buffers)
        return {**probe_estimates(ga, gb, gc, lr), "batch": int(len(ya))}   # batch: for sigma2_unit

    @staticmethod
    def _grad(net, w, xb, yb, buffers=None):
        """A gradient on the side (probes): BatchNorm statistics are updated on a throwaway copy."""
        bufs = None if buffers is None else force(buffers).detach().clone()
        return net.loss_and_grad(w.detach(), xb, yb, bufs)[1]


extension_point("executor", Executor)
register("executor", "sequential", SequentialParams,
         "reference executor: a plain loop over jobs and local steps", SequentialExecutor)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        from ..errors import ScenarioError
        raise ScenarioError([("executor.device", f"{name!r} asked for, but no CUDA device is available; use auto or cpu")])
    return torch.device(name)
