"""What an algorithm asks a client to compute, and what comes back.

The algorithm fills a `LocalSpec` (start vector, how the client trains (`training.py`),
optional prox anchor, correction vector and named vectors); the protocol fixes the number
of steps in virtual time and submits a `TrainJob`; the executor returns a `JobFuture` whose
value is a `TrainResult`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np
import torch

from .lazy import ExecutorFuture, Lazy
from .loss_stats import LossStats  # noqa: F401  (TrainResult.loss_stats)
from .training import ClientTraining, LocalRule  # noqa: F401  (LocalRule: its historical home)

Vector = Union[torch.Tensor, Lazy]


@dataclass
class LocalSpec:
    """An algorithm's answer to "how does client i train in round t".

    Attributes:
        start: the parameters the client starts from (a flat tensor, or a lazy vector).
        rule: how the client trains (`LocalRule`, `OptimizerRule` or `TrainFunction`).
        anchor: the proximal anchor (`prox_mu`); None: `start`.
        correction: a vector added to every gradient (SCAFFOLD, FedSUM); None: none.
        want_grad_mean: also return the mean raw gradient of the job.
        probe: also return the gradient probes (docs/algorithms/tsfl.md 3.4).
        buffers: the model's BatchNorm running statistics at the start (set by the protocol
            for models with buffers).
        vectors: named vectors the rule's pieces read (client state, ...; each may be lazy).
    """

    start: Vector
    rule: ClientTraining                   # how the client trains (compute/training.py)
    anchor: Optional[Vector] = None        # prox anchor; None = start
    correction: Optional[Vector] = None    # added to every gradient (SCAFFOLD / FedSUM)
    want_grad_mean: bool = False           # also return the mean raw gradient
    probe: bool = False                    # also return gradient probes (docs/algorithms/tsfl.md 3.4)
    buffers: Optional[Vector] = None       # BatchNorm running statistics at the start (set by the
                                           # protocol for models with buffers; compute/flat.py)
    vectors: dict = field(default_factory=dict)   # named vectors the rule's pieces read
                                           # (client state, ...; each may be lazy)

    def lazy_inputs(self) -> tuple:
        """The spec's vectors that are still lazy (a job runs after them)."""
        vs = (self.start, self.anchor, self.correction, self.buffers, *self.vectors.values())
        return tuple(v for v in vs if isinstance(v, Lazy))


@dataclass(eq=False)
class TrainJob:
    task: int                 # which model (multi-model FL), 0 otherwise
    client: int
    round: int
    steps: int
    spec: LocalSpec
    batch_size: Optional[int]   # None = full batch (all the client's samples every step)
    tag: int = 0                # distinguishes several jobs of one (client, round, task)
    rows: Optional[np.ndarray] = None   # subset of the client's samples (local row numbers)
                                        # this job trains on; None = all (docs/algorithms/tsfl.md 6.3, Case 3)


@dataclass
class TrainResult:
    params: torch.Tensor
    steps: int
    loss_mean: float            # mean mini-batch loss over the steps (nan if 0 steps)
    grad_mean: Optional[torch.Tensor] = None
    probe: Optional[dict] = None   # {"G2", "sigma2", "L"} when the spec asked for probes
    buffers: Optional[torch.Tensor] = None   # BatchNorm running statistics after the steps
    loss_stats: Optional["LossStats"] = None    # when the executor takes them (compute/loss_stats.py)


PROBE_KEY = 1 << 20   # extra key of the probe batch's stream: ("batches", client, round, task, tag, PROBE_KEY)


def probe_estimates(ga: torch.Tensor, gb: torch.Tensor, gc: torch.Tensor, lr: float) -> dict:
    """docs/algorithms/tsfl.md 3.4: from g_a (first training batch at w^t), g_b (an independent batch at w^t)
    and g_c (batch a again at w^t - lr g_a):
    G2 = (|g_a|^2 + |g_b|^2)/2, sigma2 = |g_a - g_b|^2/2, L = |g_c - g_a| / (lr |g_a|)
    (L is None when g_a = 0)."""
    na = float(ga.double().norm())
    G2 = (na ** 2 + float(gb.double().norm()) ** 2) / 2
    sigma2 = float((ga.double() - gb.double()).norm()) ** 2 / 2
    L = float((gc.double() - ga.double()).norm()) / (lr * na) if na > 0 else None
    return {"G2": G2, "sigma2": sigma2, "L": L}


class JobFuture(ExecutorFuture):
    __slots__ = ("probe_job",)

    def __init__(self, job: TrainJob, executor, probe_job: "Optional[JobFuture]" = None):
        super().__init__(job, executor)
        self.probe_job = probe_job

    def inputs(self):
        return self.job.spec.lazy_inputs()

    @property
    def params(self) -> "Lazy":
        from .lazy import derived
        return derived(lambda r: r.params, self)

    @property
    def probe(self):
        """The probe scalars (docs/algorithms/tsfl.md 3.4), lazy; a separate one-step job, so reading them
        does not compute the whole training (DMS's filtered clients stay uncomputed)."""
        from .lazy import derived
        return None if self.probe_job is None else derived(lambda r: r.probe, self.probe_job)


# ---------------------------------------------------------------------------- cohorts
@dataclass(eq=False)
class CohortJob:
    """The jobs of one round's clients that share one `LocalSpec` (a round job, docs/architecture.md
    section 3): client `clients[i]` trains `steps[i]` local steps from `spec`. Each row is
    exactly the TrainJob (task, client, round, steps, spec, batch_size): the same batches from
    the same keyed stream, the same result, whichever executor runs it."""

    task: int
    clients: np.ndarray
    round: int
    steps: np.ndarray
    spec: LocalSpec
    batch_size: Optional[int]

    def jobs(self) -> list:
        return [TrainJob(self.task, c, self.round, k, self.spec, self.batch_size)
                for c, k in zip(self.clients.tolist(), self.steps.tolist())]


@dataclass
class CohortResult:
    params: list                # row i: the final parameters of clients[i] (its job's own tensor:
                                # no (n, dim) stack, which for large models would double the memory)
    steps: np.ndarray
    loss_mean: np.ndarray       # per row (nan where 0 steps)
    loss_stats: Optional[list] = None   # per row, when the executor takes them (compute/loss_stats.py)


class CohortFuture(ExecutorFuture):
    """The future of a CohortJob: one lazy for the whole cohort (no object per client)."""

    __slots__ = ()

    def inputs(self):
        return self.job.spec.lazy_inputs()
