"""The selector API (docs/selection.md): what a selector is given each round, what it
returns, and what it is told afterwards.

- `Selector`, the declared base: `select(ctx)` returns the ids to ask (a sequence, or a
  `Chosen` with aggregation weights); `observe(outcomes)` is called after each aggregation
  with the round's `RoundOutcomes`. Declared capabilities (class attributes, an instance
  may narrow them in its constructor): `observes` (the engine keeps the per-client history
  and calls `observe`), `reads_loss` (the executor's local training accumulates each
  job's loss statistics).
- `SelectionContext`: one per round: the round, virtual time, k, the deadline, the available
  ids, read-only per-client fields (`n_samples`, the a-priori `profile`, the observed
  `history`), the run's `selection` stream, and `probe_loss` (real compute, charged in
  virtual time by the engine).
"""
from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Optional, Sequence, Union

import numpy as np

from .history import History


class Status(enum.IntEnum):
    """What became of a selected client (docs/selection.md, "Outcomes")."""

    AGGREGATED = 0     # its update arrived and the aggregation read it
    STRAGGLER = 1      # it ran (or was due to) but its update was not used: cut at the close, unread
    DROPPED = 2        # it went offline


@dataclass(frozen=True)
class Chosen:
    """A selection with aggregation weights: `weights[i]` is the relative weight of `ids[i]`
    (renormalised over the clients whose updates arrive); the algorithm must declare that it
    honours them (`Algorithm.selection_weights`)."""

    ids: Sequence[int]
    weights: Optional[Sequence[float]] = None


@dataclass(frozen=True)
class Profile:
    """A-priori per-client estimates from the device models, aligned with the ids asked for:
    seconds per local step, and the seconds of this protocol's download, local work and
    upload on the client's own link (no jitter, no contention; NaN where a model gives none)."""

    step_time: np.ndarray
    t_down: np.ndarray
    t_comp: np.ndarray
    t_up: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.t_down + self.t_comp + self.t_up


@dataclass(frozen=True)
class RoundOutcomes:
    """What became of one round's selected clients (columns, one entry per client, in
    ascending id). Seconds: `t_down`, `t_comp`, `t_up` as observed (NaN: the phase did not
    end; `t_comp` is the whole planned computation once it started); `total` the client's
    full duration, its unfinished phases estimated from its profile (a cut client's penalty
    then reflects how slow it is, not where the round stopped it). `met_deadline`: its
    upload arrived before the round closed; `cut`: the close stopped it. Loss statistics
    of aggregated clients (NaN / 0 otherwise): count, sum and sum of squares of the
    per-sample training losses, unique samples trained, and the last mini-batch's count and
    sum of squares, and the EMA (0.2) of the per-batch mean squared loss over the first epoch."""

    round: int
    ids: np.ndarray
    status: np.ndarray
    t_down: np.ndarray
    t_comp: np.ndarray
    t_up: np.ndarray
    total: np.ndarray
    met_deadline: np.ndarray
    cut: np.ndarray
    loss_n: np.ndarray
    loss_sum: np.ndarray
    loss_sq: np.ndarray
    unique: np.ndarray
    last_n: np.ndarray
    last_sq: np.ndarray
    ema_sq: np.ndarray

    def __len__(self):
        return len(self.ids)

    @property
    def aggregated(self) -> np.ndarray:
        return self.status == Status.AGGREGATED


def _frozen(a) -> np.ndarray:
    v = np.asarray(a).view()
    v.setflags(write=False)
    return v


@dataclass
class SelectionContext:
    """One round's view for a selector (read-only arrays). `profile(ids)` and
    `probe_loss(ids, max_samples)` are the engine's (None in a hand-built context)."""

    round: int
    available: np.ndarray
    num_clients: int
    rng: Optional[np.random.Generator] = None
    now: float = 0.0
    k: Optional[int] = None
    deadline: Optional[float] = None
    n_samples: Optional[np.ndarray] = None
    history: History = field(default_factory=History)
    profile_fn: Optional[Callable[[np.ndarray], Profile]] = None
    probe_fn: Optional[Callable[[np.ndarray, Optional[int]], np.ndarray]] = None

    def __post_init__(self):
        self.available = _frozen(np.asarray(self.available, dtype=np.int64))
        if self.n_samples is not None:
            self.n_samples = _frozen(self.n_samples)

    def profile(self, ids) -> Profile:
        """A-priori estimates of these clients (device models; see `Profile`)."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.profile_fn is None:
            nan = np.full(len(ids), np.nan)
            return Profile(nan, nan, nan, nan)
        return self.profile_fn(ids)

    def probe_loss(self, ids, max_samples: Optional[int] = None) -> np.ndarray:
        """The current global model's mean per-sample loss on each client's training data (all
        of it, or `max_samples` rows drawn uniformly): real compute; the engine charges its
        time before the round's broadcast (docs/selection.md, "Probes")."""
        if self.probe_fn is None:
            raise RuntimeError("this context has no loss probe (the engine provides one)")
        return np.asarray(self.probe_fn(np.asarray(ids, dtype=np.int64), max_samples), dtype=np.float64)

    def count(self, default: Optional[int] = None) -> int:
        """k, or `default` when the selection block gives none; at least 1."""
        k = self.k if self.k is not None else default
        if k is None:
            raise ValueError("this selector needs k (or fraction) in its selection block")
        return max(1, int(k))


class Selector(ABC):
    """Base of every selector (built-in or plugin). See the module doc and docs/selection.md."""

    name: str = "?"
    #: declared: keep the per-client history and call `observe` after each aggregation
    observes: ClassVar[bool] = False
    #: declared: read the loss statistics of aggregated clients (the executor accumulates them)
    reads_loss: ClassVar[bool] = False

    @abstractmethod
    def select(self, ctx: SelectionContext) -> Union[Sequence[int], Chosen]:
        """The clients to ask this round (a subset of `ctx.available`, no duplicates)."""

    def observe(self, outcomes: RoundOutcomes) -> None:
        """What became of the clients selected in `outcomes.round` (only with `observes`)."""
        return None

    def check(self, ctx: SelectionContext) -> list:
        """Problems of this selector in this fleet, as (field of its selection block, message),
        found before round 1 (`ctx`: round 0, every client available). Default: none."""
        return []


def count_of(k: Optional[int], fraction: Optional[float], n: int) -> int:
    """k, or ceil(fraction * n) (at least 1)."""
    if k is not None:
        return int(k)
    return max(1, math.ceil(fraction * n - 1e-9))
