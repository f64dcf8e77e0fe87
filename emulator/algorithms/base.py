"""The `Algorithm` interface: broadcast / local_spec / upload / aggregate.

An algorithm module reads like its paper's algorithm box: what the server sends down,
how a client trains, what the client sends up (and keeps), how the server aggregates.
It knows nothing of virtual time; the protocol decides when each verb is called and how
many local steps a client completes. Values it hands out may be lazy (`compute.lazy`):
a client's upload is typically a function of a training job that has not run yet.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from ..compute.jobs import JobFuture, LocalSpec


@dataclass
class AlgoContext:
    task: int                    # model index (multi-model FL); 0 otherwise
    dim: int                     # parameters of the model
    num_clients: int
    client_sizes: np.ndarray     # training samples per client
    x0: torch.Tensor             # initial global parameters (flat)
    rng: np.random.Generator     # the `algorithm` stream
    lr_scale: float = 1.0


@dataclass
class Broadcast:
    """What the server sends down in round t: vectors (their size gives download bytes)."""

    vectors: list
    round: int
    numel: int = field(init=False)      # counted once: every recipient's download size

    def __post_init__(self):
        self.numel = int(sum(v.numel() for v in self.vectors))


@dataclass
class Upload:
    """What a client sends up: vectors (possibly lazy) and their total size, known before
    anything is computed (it sets the upload time)."""

    vectors: list
    numel: int
    result: Optional[JobFuture] = None
    meta: dict = field(default_factory=dict)


@dataclass
class Arrival:
    """An upload as the aggregation sees it: vectors resolved to tensors."""

    client: int
    round: int                   # round whose broadcast the client trained from
    vectors: Optional[list]      # None when the algorithm did not read this upload
    n_samples: int
    steps: int
    train_loss: float
    meta: dict = field(default_factory=dict)


class Algorithm:
    name = "?"
    supports: frozenset = frozenset({"rounds"})
    #: the documented total of one aggregation's weights (None: not a weighted mean)
    weights_total: Optional[float] = 1.0
    #: per-client values of the last aggregation for clients.csv ({column: {client: value}})
    client_info: Optional[dict] = None
    #: per-aggregation values of the last aggregation for metrics.csv ({column: value})
    round_info: Optional[dict] = None

    def __init__(self, params, ctx: AlgoContext):
        self.p = params
        self.ctx = ctx
        self.x = ctx.x0.clone()

    # -- the four verbs ----------------------------------------------------------
    def broadcast(self, t: int) -> Broadcast:
        return Broadcast([self.x], t)

    def local_spec(self, client: int, t: int, received: Broadcast) -> LocalSpec:
        raise NotImplementedError

    def upload(self, client: int, t: int, result: JobFuture) -> Upload:
        raise NotImplementedError

    def reads(self, t: int, arrivals: Sequence[Arrival]) -> list:
        """Which arrivals' vectors `aggregate` will read (default: all). Decided from their
        metadata only (client, steps, n_samples, meta such as tau); the others are never
        resolved, so their training is never computed (DESIGN.md: laziness)."""
        return [a.client for a in arrivals]

    def aggregate(self, t: int, arrivals: Sequence[Arrival]) -> dict:
        """Update the server state from `arrivals`; return {client: weight}."""
        raise NotImplementedError

    def upload_numel(self) -> int:
        """Parameters a client uploads (known before anything is computed)."""
        return self.ctx.dim

    # -- reading the server state --------------------------------------------------
    def global_params(self) -> torch.Tensor:
        return self.x

    def lr(self, t: int) -> float:
        """Local learning rate of round t (1-based): lr * lr_decay^(t-1)."""
        return self.p.lr * self.ctx.lr_scale * (getattr(self.p, "lr_decay", 1.0) ** max(t - 1, 0))


def sample_weights(arrivals: Sequence[Arrival], weighting: str) -> np.ndarray:
    """n_k / sum n (weighting='samples') or 1/K (weighting='uniform') over the arrivals."""
    if not arrivals:
        return np.zeros(0)
    if weighting == "uniform":
        return np.full(len(arrivals), 1.0 / len(arrivals))
    n = np.array([a.n_samples for a in arrivals], dtype=np.float64)
    return n / n.sum()


def weighted_sum(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    stacked = torch.stack(list(vectors))
    w = torch.as_tensor(np.asarray(weights), dtype=stacked.dtype, device=stacked.device)
    return (w[:, None] * stacked).sum(0)
