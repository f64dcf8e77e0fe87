"""The `Algorithm` interface: broadcast / local_spec / upload / aggregate.

An algorithm module reads like its paper's algorithm box: what the server sends down,
how a client trains, what the client sends up (and keeps), how the server aggregates.
It knows nothing of virtual time; the protocol decides when each verb is called and how
many local steps a client completes. Values it hands out may be lazy (`compute.lazy`):
a client's upload is typically a function of a training job that has not run yet.

`Algorithm` is an abstract base class: a subclass must define `local_spec`, `upload` and
`aggregate` (a class missing one is refused when it is registered, emulator/registry.py);
`broadcast`, `reads`, `cohort_spec`, `aggregate_rows`, `summary` and `lr` have defaults.
What an algorithm can do beyond the four verbs is declared, never discovered: a class
attribute typed on `Algorithm` (`weights_total`, `down_vectors`/`up_vectors`), the class
keyword `cohort_path=True` (declared by each class that keeps its promise, not inherited), or a
capability base class the protocol checks with `isinstance` (`BackgroundTraining`: FedUMF's
unselected clients train too; `VersionedModel`: the server model carries a version, as
`async` needs). docs/engine.md lists them.

Message sizes are declared once, per direction (`down_vectors`, `up_vectors`: how many
model-sized vectors one message carries); `message_numel` turns them into parameters,
which give transfer times and bytes. The protocol checks every resolved message against
the declaration. Per-client state lives in `ctx.states` (algorithms/state.py).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Sequence

import numpy as np
import torch

from .. import registry
from ..compute.jobs import JobFuture, LocalSpec
from ..rng import Streams
from .state import ClientStates


@dataclass
class AlgoContext:
    """What the run gives an algorithm at construction.

    Attributes:
        task: the model index under multi-model FL; 0 otherwise.
        dim: the model's number of parameters (the length of every vector).
        num_clients: clients in the fleet.
        client_sizes: training samples per client.
        x0: the initial global parameters (flat).
        rng: the run's `algorithm` random stream (its draws are recorded, so a run replays).
        states: the per-client state store (`ClientStates`; created if not given).
    """

    task: int                    # model index (multi-model FL); 0 otherwise
    dim: int                     # parameters of the model
    num_clients: int
    client_sizes: np.ndarray     # training samples per client
    x0: torch.Tensor             # initial global parameters (flat)
    rng: np.random.Generator     # the `algorithm` stream
    states: Optional[ClientStates] = None   # per-client state store (created if not given)
    streams: Optional[Streams] = None       # the run's named streams, for keyed draws (rng.py)

    def __post_init__(self):
        if self.states is None:
            self.states = ClientStates(self.num_clients, self.dim, self.x0.device, self.x0.dtype)


@dataclass
class Broadcast:
    """What the server sends down in round t: vectors (their size is declared by the
    algorithm's `down_vectors`).

    Attributes:
        vectors: flat tensors of the model's size (the global model first, for most methods).
        round: the round t this broadcast starts.
    """

    vectors: list
    round: int


@dataclass
class Upload:
    """What a client sends up: vectors (possibly lazy; their size is declared by the
    algorithm's `up_vectors`, known before anything is computed: it sets the upload time).

    Attributes:
        vectors: flat tensors or lazy references to the job's result (`JobFuture`).
        result: the job's future, when the algorithm wants it resolved with the upload.
        meta: small metadata the aggregation reads without resolving vectors (e.g. tau).
    """

    vectors: list
    result: Optional[JobFuture] = None
    meta: dict = field(default_factory=dict)


@dataclass
class Arrival:
    """An upload as the aggregation sees it: vectors resolved to tensors.

    Attributes:
        client: the client's id (0 .. num_clients - 1).
        round: the round whose broadcast the client trained from (earlier than the current
            round for a stale arrival under an asynchronous protocol).
        vectors: the `Upload.vectors` as flat tensors of the model's size, in the order the
            algorithm's `upload` gave them; None when `reads` left this arrival out.
        n_samples: the client's training samples.
        steps: local steps the client ran (a deadline may cut them short).
        train_loss: the mean training loss of the job.
        meta: the `Upload.meta` the algorithm attached (e.g. T-SFL's tau).
        selection_weight: the selection's weight for this client (docs/selection.md), None
            when the selector gave none.
    """

    client: int
    round: int                   # round whose broadcast the client trained from
    vectors: Optional[list]      # None when the algorithm did not read this upload
    n_samples: int
    steps: int
    train_loss: float
    meta: dict = field(default_factory=dict)
    selection_weight: Optional[float] = None   # the selection's weight for this client (docs/selection.md)


@dataclass
class Rows:
    """A round's arrivals as columns (the cohort path, `Algorithm.aggregate_rows`): row i is
    client `clients[i]`, in arrival order.

    Attributes:
        clients: client ids, one per row.
        n_samples: training samples, one per row.
        steps: local steps run, one per row.
        params: row i's trained parameters (one flat tensor each).
        train_loss: mean training loss, one per row.
        selection_weight: the selection's weights, one per row, or None.
    """

    clients: np.ndarray
    n_samples: np.ndarray
    steps: np.ndarray
    params: list                  # row i: the trained parameters of clients[i] (a tensor each)
    train_loss: np.ndarray
    selection_weight: Optional[np.ndarray] = None   # the selection's weights, one per row (docs/selection.md)

    def __len__(self):
        return len(self.clients)

    def arrivals(self, t: int) -> list:
        """These rows as the Arrivals `aggregate` takes (round t's trained parameters)."""
        return [Arrival(int(c), t, [p], int(n), int(k), float(loss))
                for c, n, k, p, loss in zip(self.clients, self.n_samples, self.steps, self.params, self.train_loss)]


@dataclass
class Aggregation:
    """What one aggregation did: each client's weight (its share of the new model; 0 for a
    client whose upload was not used), per-client values for clients.csv
    ({column: {client: value}}) and per-aggregation values for metrics.csv ({column: value})."""

    weights: dict = field(default_factory=dict)
    client_cols: dict = field(default_factory=dict)
    round_cols: dict = field(default_factory=dict)


class Algorithm(ABC):
    """An algorithm: `local_spec`, `upload` and `aggregate` are required (abstract); the rest
    have defaults. Declared per class: `supports`, `weights_total`, `down_vectors` /
    `up_vectors`, `client_state`, and the class keywords `cohort_path` and `selection_weights`.

    Args:
        params (Params): the validated parameter model of the algorithm's block (`FedAvgParams`, or
            the `Params` subclass it was registered with).
        ctx: what the run gives the algorithm (`AlgoContext`).

    Attributes:
        p: the `params` given to the constructor (read-only by convention).
        ctx: the `AlgoContext` given to the constructor.
        x: the global parameters, one flat tensor of `ctx.dim` values (a clone of `ctx.x0` at
            the start); `broadcast` sends it and `aggregate` replaces it.
    """

    name = "?"
    supports: frozenset = frozenset({"rounds"})
    #: the documented total of one aggregation's weights (None: not a weighted mean)
    weights_total: Optional[float] = 1.0
    #: model-sized vectors in one message, per direction (docs/algorithms/fedsum.md 3.5)
    down_vectors: int = 1
    up_vectors: int = 1
    #: kinds of per-client state kept in `ctx.states` (algorithms/state.py), for `flemu list`
    client_state: tuple = ()
    #: declared capability: the round's participants train from one spec (`cohort_spec`) and
    #: are aggregated as columns (`aggregate_rows`). Declared with the class keyword
    #: (`class FedAvg(Algorithm, cohort_path=True)`) by each class that keeps the promise
    #: (`cohort_spec`): it is not inherited, since a subclass may change the client side or
    #: the aggregation (a FedAvg subclass overriding `aggregate` goes client by client, and
    #: its `aggregate` is called). Read it, never assign it in a class body.
    cohort_path: ClassVar[bool] = False
    #: declared capability: the aggregation weighs arrivals by the selection's weights when a
    #: selector gives them (`Arrival.selection_weight`, `Rows.selection_weight`; power-of-choice's
    #: 1/m). Declared with the class keyword (`selection_weights=True`), like `cohort_path`, and
    #: not inherited: a subclass with its own aggregation does not silently honour them.
    selection_weights: ClassVar[bool] = False
    #: what the upload's vectors are relative to, for a codec (docs/algorithms/compression.md 1.1):
    #: "start" (models: the update is taken against the job's start), "zero" (already updates),
    #: None (not declared: a codec that changes values is refused). Inherited: a subclass that
    #: changes what it uploads declares it again.
    up_reference: ClassVar[Optional[str]] = None
    #: declared capability: the aggregation's guarantee rests on a bound of each client's
    #: decoded upload taken alone (DP-FedAvg's clipping: one client's sensitivity,
    #: docs/algorithms/dp.md 1.1); an exchange codec, whose decoding of one upload depends on
    #: every other's, is then refused (compression.md 2.6). Inherited.
    upload_sensitivity: ClassVar[bool] = False

    def __init_subclass__(cls, cohort_path: bool = False, selection_weights: bool = False, **kw):
        super().__init_subclass__(**kw)
        cls.cohort_path = bool(cohort_path)
        cls.selection_weights = bool(selection_weights)

    def __init__(self, params, ctx: AlgoContext):
        self.p = params
        self.ctx = ctx
        self.x = ctx.x0.clone()

    def start_from(self, x: torch.Tensor) -> None:
        """Set the global parameters before the first round (a protocol's declared
        initialisation, e.g. multi-model FL's x_0 = 0)."""
        self.x = x

    @property
    def states(self) -> ClientStates:
        return self.ctx.states

    # -- the four verbs ----------------------------------------------------------
    def broadcast(self, t: int) -> Broadcast:
        return Broadcast([self.x], t)

    @abstractmethod
    def local_spec(self, client: int, t: int, received: Broadcast) -> LocalSpec:
        """Required. How `client` trains in round t from what it `received`."""

    @abstractmethod
    def upload(self, client: int, t: int, result: JobFuture) -> Upload:
        """Required. What `client` sends up (and keeps) once its job gives `result` (lazy)."""

    def cohort_spec(self, t: int, received: Broadcast) -> Optional[LocalSpec]:
        """The one LocalSpec every participant of round t trains from, asked only of an
        algorithm that declares `cohort_path` (FedAvg, FedProx): the protocol then submits the
        round's jobs as one cohort and aggregates their rows with `aggregate_rows` (no object
        per participant). None: `local_spec` / `upload` per client this round.
        An algorithm that declares it promises that its upload is the trained parameters and
        nothing else, that it keeps no per-client state, and that it reads every arrival."""
        return None

    def aggregate_rows(self, t: int, rows: Rows) -> Aggregation:
        """`aggregate` of a cohort's arrivals given as columns (only with `cohort_spec`).
        Default: `aggregate` of the rows as Arrivals; a class declaring `cohort_path` may
        compute the same from the columns directly (FedAvg)."""
        return self.aggregate(t, rows.arrivals(t))

    def reads(self, t: int, arrivals: Sequence[Arrival]) -> list:
        """Which arrivals' vectors `aggregate` will read (default: all). Decided from their
        metadata only (client, steps, n_samples, meta such as tau); the others are never
        resolved, so their training is never computed (docs/engine.md: laziness)."""
        return [a.client for a in arrivals]

    @abstractmethod
    def aggregate(self, t: int, arrivals: Sequence[Arrival]) -> Aggregation:
        """Required. Update the server state from `arrivals`."""

    def message_numel(self, direction: str) -> int:
        """Parameters in one message ('down' or 'up'), known before anything is computed."""
        return self.ctx.dim * (self.down_vectors if direction == "down" else self.up_vectors)

    def summary(self) -> dict:
        """Algorithm-specific figures for summary.json (default none)."""
        return {}

    # -- reading the server state --------------------------------------------------
    def global_params(self) -> torch.Tensor:
        return self.x

    def lr(self, t: int) -> float:
        """Local learning rate of round t (1-based): the params' `lr` (every algorithm's
        params declare one); an algorithm with a schedule overrides this (FedAvg: lr_decay,
        lr_offset; the FedSUM family: lr_schedule)."""
        return self.p.lr


registry.extension_point("algorithm", Algorithm, functions=False)


class BackgroundTraining(ABC):
    """Capability: clients that were not selected train too, without uploading; the result
    is kept and read rounds later (FedUMF's unselected clients). A protocol that sees an
    algorithm of this kind (`isinstance`) runs those jobs (sim/protocols/background.py) and
    tells the algorithm what became of them; it never uses the vector engine or cohorts."""

    @property
    @abstractmethod
    def unfinished(self) -> str:
        """What a background job still running when its client is selected becomes:
        'skip' (abandoned), 'wait' (the client starts its round after it) or 'partial'
        (its completed steps are kept)."""

    @abstractmethod
    def begin_round(self, t: int, selected, available) -> None:
        """Round t starts with these selected and these online clients."""

    @abstractmethod
    def background_spec(self, client: int, t: int, received: Broadcast) -> LocalSpec:
        """The LocalSpec an unselected online client trains from in round t."""

    @abstractmethod
    def keep(self, client: int, t: int, result: JobFuture, spec: LocalSpec) -> None:
        """Client's round-t background job ended in virtual time with `result`."""

    @abstractmethod
    def forget(self, client: int, reason: str) -> None:
        """Client's background work produced nothing (`offline`, `superseded`, `unfinished`)."""


class VersionedModel:
    """Capability: the server model carries a version, the number of updates applied to it
    (FedAsync). `async` requires it: an arrival trained from version v0 is aggregated as
    version + 1 and its staleness is read from the difference."""

    #: updates applied to the server model so far (0 at the start)
    version: int = 0


def sample_weights(arrivals: Sequence[Arrival], weighting: str) -> np.ndarray:
    """n_k / sum n (weighting='samples') or 1/K (weighting='uniform') over the arrivals; when the
    selection gave weights, those renormalised over the arrivals (docs/selection.md)."""
    if arrivals and arrivals[0].selection_weight is not None:
        return selection_shares(np.array([a.selection_weight for a in arrivals], dtype=np.float64))
    return size_weights(np.array([a.n_samples for a in arrivals], dtype=np.float64), weighting)


def row_weights(rows: "Rows", weighting: str) -> np.ndarray:
    """`sample_weights` of a cohort's rows."""
    if rows.selection_weight is not None:
        return selection_shares(rows.selection_weight)
    return size_weights(rows.n_samples, weighting)


def selection_shares(w: np.ndarray) -> np.ndarray:
    """The selection's weights of the arrivals, renormalised to sum to 1."""
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum() if len(w) else w


def size_weights(n_samples: np.ndarray, weighting: str) -> np.ndarray:
    """`sample_weights` from the arrivals' sample counts."""
    if not len(n_samples):
        return np.zeros(0)
    if weighting == "uniform":
        return np.full(len(n_samples), 1.0 / len(n_samples))
    n = np.asarray(n_samples, dtype=np.float64)
    return n / n.sum()


def weighted_sum(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """sum_k w_k v_k, accumulated vector by vector (no [K, d] stack: 50 ResNet-sized
    uploads would need gigabytes, and the stacked product was 10x slower)."""
    vectors = list(vectors)
    out = torch.zeros_like(vectors[0])
    for v, w in zip(vectors, np.asarray(weights, dtype=np.float64).tolist()):
        out.add_(v, alpha=w)
    return out
