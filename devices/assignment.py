"""Multi-model assignment: which model each participating client trains in a round
(docs/algorithms/multimodel.md sections 2.3-2.5; no torch, usable alone).

`assign(t, available, rng)` returns, for round t (1-based), one sorted array of client ids per
model (model m = index m, 0-based); a client appears at most once. Every draw comes from the
generator passed in (the run's `algorithm`-keyed assignment stream), in round order.

- `MfaRand` (Alg. 2): each round sample K of the available clients (all when K is None),
  split them uniformly at random into M groups (array_split of a permutation: sizes differ by
  at most one), and match groups to models by a random bijection (reference draw of 2.3).
- `MfaRR` (Alg. 3): at each frame start (t - 1) mod M = 0 sample K clients (once per frame,
  A4 `rr_resample: frame`; or every round with `round`) and partition them into M groups
  S_1..S_M; in round u of the frame, group j trains model ((j + u - 2) mod M) + 1, i.e.
  0-based model m uses group (m - u0) mod M with u0 = (t - 1) mod M. Frame clients that are
  offline in a later round of the frame sit it out (their group is smaller that round).
- `Sequential` (the gain's baseline, section 3): model m alone in rounds
  (m R, (m + 1) R] (R = rounds per model), with K clients per round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


def split(clients: np.ndarray, M: int, allow_unequal: bool = True, K: Optional[int] = None) -> list:
    """M groups of sizes ceil / floor (array_split order, spec 2.5). Equal groups only (A5): K
    itself must split (the scenario validation sees to it); a round with fewer clients online
    leaves the last ones of the (random) order out, so that the groups stay equal."""
    if not allow_unequal and len(clients) % M:
        if K is not None and len(clients) >= K:
            raise ValueError(f"{len(clients)} clients do not split into {M} equal groups")
        clients = np.asarray(clients)[: len(clients) - len(clients) % M]
    return [np.asarray(g, dtype=np.int64) for g in np.array_split(np.asarray(clients, dtype=np.int64), M)]


def sample(available, K: Optional[int], rng: np.random.Generator) -> np.ndarray:
    """K of the available clients uniformly without replacement (all when K is None or
    fewer are available), in a random order."""
    avail = np.asarray(available, dtype=np.int64)
    if K is None or len(avail) <= K:
        return avail[rng.permutation(len(avail))]
    return avail[rng.choice(len(avail), size=K, replace=False)]


@dataclass
class MfaRand:
    M: int
    K: Optional[int] = None
    allow_unequal: bool = True

    def assign(self, t: int, available, rng: np.random.Generator) -> list:
        chosen = sample(available, self.K, rng)                   # pi = permutation of the participants
        chunks = split(chosen, self.M, self.allow_unequal, self.K)
        sigma = rng.permutation(self.M)                           # random matching of groups to models
        return [np.sort(chunks[sigma[m]]) for m in range(self.M)]


@dataclass
class MfaRR:
    M: int
    K: Optional[int] = None
    allow_unequal: bool = True
    resample: str = "frame"
    groups: list = field(default_factory=list, repr=False)     # S_1..S_M of the current frame

    def assign(self, t: int, available, rng: np.random.Generator) -> list:
        u0 = (t - 1) % self.M
        if u0 == 0 or not self.groups or self.resample == "round":   # a new frame (A2: t - 1 mod M = 0)
            self.groups = split(sample(available, self.K, rng), self.M, self.allow_unequal, self.K)
        online = np.asarray(available, dtype=np.int64)
        return [np.sort(np.intersect1d(self.groups[(m - u0) % self.M], online))
                for m in range(self.M)]

    @staticmethod
    def model_of(j: int, u: int, M: int) -> int:
        """Alg. 3 line 8 (1-based): group j in round u of a frame trains model ((j + u - 2) mod M) + 1."""
        return ((j + u - 2) % M) + 1


@dataclass
class Sequential:
    M: int
    rounds_per_model: int
    K: Optional[int] = None

    def active(self, t: int) -> int:
        """The model trained in round t (0-based); M when every model has had its rounds."""
        return min((t - 1) // self.rounds_per_model, self.M)

    def assign(self, t: int, available, rng: np.random.Generator) -> list:
        m = self.active(t)
        out = [np.zeros(0, dtype=np.int64) for _ in range(self.M)]
        if m < self.M:
            out[m] = np.sort(sample(available, self.K, rng))
        return out
