"""The selectors without memory (docs/algorithms/selection.md section 5): uniform, all,
cyclic, reshuffled cyclic, biased, sequence. Each returns sorted client ids from
`ctx.round` (counting from 1), `ctx.available`, `ctx.num_clients` and `ctx.rng` (the run's
long-lived `selection` stream, drawn in round order); patterns follow FedSUM's Cases 1, 3, 4
(biased: App. H.8).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from .base import Selector, count_of as _count


@dataclass
class UniformSelection(Selector):
    """k clients drawn uniformly without replacement among the available ones (all of them
    when fewer than k are available); `fraction` gives k = ceil(fraction * N) (FedSUM Case 1)."""

    k: Optional[int] = None
    fraction: Optional[float] = None
    name: str = "uniform"

    def count(self, n):
        return _count(self.k, self.fraction, n)

    def select(self, ctx):
        available, num_clients, rng = ctx.available, ctx.num_clients, ctx.rng
        k = self.count(num_clients)
        avail = np.asarray(available, dtype=np.int64)       # NumPy over the fleet, no per-client objects
        if len(avail) <= k:
            return np.sort(avail).tolist()
        chosen = rng.choice(len(avail), size=k, replace=False)
        return np.sort(avail[chosen]).tolist()


@dataclass
class AllSelection(Selector):
    """Every available client takes part."""

    name: str = "all"

    def select(self, ctx):
        available = ctx.available
        return sorted(available)


@dataclass
class CyclicSelection(Selector):
    """Deterministic cyclic (FedSUM Case 3): a fixed order; round t takes the next block of S
    consecutive clients, wrapping: S^t = {((t-1) S + j) mod N : j = 0..S-1}. Clients of the
    block that are not available are skipped, not replaced."""

    k: Optional[int] = None
    fraction: Optional[float] = None
    name: str = "cyclic"

    def select(self, ctx):
        round_, available, num_clients = ctx.round, ctx.available, ctx.num_clients
        S = _count(self.k, self.fraction, num_clients)
        block = {((round_ - 1) * S + j) % num_clients for j in range(S)}
        return sorted(block.intersection(available))


@dataclass
class ReshuffledCyclicSelection(Selector):
    """Reshuffled cyclic (FedSUM Case 4): at the start of each epoch of M = ceil(N/S) rounds a
    fresh random permutation; round t takes block (t-1) mod M of it (the last block is
    smaller when S does not divide N). Unavailable clients of the block are skipped."""

    k: Optional[int] = None
    fraction: Optional[float] = None
    name: str = "reshuffled_cyclic"
    _epoch: int = field(default=-1, repr=False)
    _perm: Optional[np.ndarray] = field(default=None, repr=False)

    def select(self, ctx):
        round_, available, num_clients, rng = ctx.round, ctx.available, ctx.num_clients, ctx.rng
        S = _count(self.k, self.fraction, num_clients)
        M = -(-num_clients // S)
        epoch, b = divmod(round_ - 1, M)
        while self._epoch < epoch:       # one permutation per epoch, drawn in epoch order
            self._perm = rng.permutation(num_clients)
            self._epoch += 1
        block = set(int(c) for c in self._perm[b * S:(b + 1) * S])
        return sorted(block.intersection(available))


@dataclass
class BiasedSelection(Selector):
    """Each available client is selected independently with its own probability p_i.
    `p`: one number for all, or a list (one per client); or a staircase decreasing with
    the client index: p_i = max(floor, start - step * floor(i / every)) (0-based i; FedSUM
    App. H.8 is start 0.5, step 0.05, every 11, floor 0.05)."""

    p: object = None
    start: Optional[float] = None
    step: float = 0.0
    every: int = 1
    floor: float = 0.0
    name: str = "biased"
    _probs: Optional[np.ndarray] = field(default=None, repr=False)

    def probs(self, n) -> np.ndarray:
        if self._probs is None or len(self._probs) != n:
            if self.p is not None:
                p = np.full(n, float(self.p)) if np.isscalar(self.p) else np.asarray(self.p, float)
                if len(p) != n:
                    raise ValueError(f"{len(p)} probabilities for {n} clients")
            else:
                i = np.arange(n)
                p = np.maximum(self.floor, self.start - self.step * (i // self.every))
            self._probs = np.clip(p, 0.0, 1.0)
        return self._probs

    def select(self, ctx):
        available, num_clients, rng = ctx.available, ctx.num_clients, ctx.rng
        p = self.probs(num_clients)
        u = rng.random(num_clients)          # one draw per client per round, whether available or not
        avail = np.zeros(num_clients, dtype=bool)
        avail[list(available)] = True
        return sorted(np.flatnonzero(avail & (u < p)).tolist())


@dataclass
class SequenceSelection(Selector):
    """A given sequence of client sets: round t takes `sets[t-1]` (its available members);
    after the last set the sequence repeats (`repeat`) or nobody is selected. For replaying
    a recorded participation and for hand-checked tests (docs/algorithms/fedumf.md T2, docs/algorithms/fedsum.md SEQ)."""

    sets: Sequence = ()
    repeat: bool = True
    name: str = "sequence"

    def select(self, ctx):
        round_, available = ctx.round, ctx.available
        n = len(self.sets)
        if n == 0 or (round_ > n and not self.repeat):
            return []
        block = {int(c) for c in self.sets[(round_ - 1) % n]}
        return sorted(block.intersection(int(c) for c in available))
