"""Server-side selection: which of the available clients the server asks to train."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


class Selection:
    name: str = "?"

    def select(self, round_: int, available: Sequence[int], num_clients: int,
               rng: np.random.Generator) -> list[int]:
        raise NotImplementedError


@dataclass
class UniformSelection(Selection):
    """k clients drawn uniformly without replacement among the available ones
    (all of them when fewer than k are available). `fraction` gives k = ceil(fraction * N)."""

    k: Optional[int] = None
    fraction: Optional[float] = None
    name: str = "uniform"

    def count(self, num_clients: int) -> int:
        if self.k is not None:
            return self.k
        return max(1, math.ceil(self.fraction * num_clients - 1e-9))

    def select(self, round_, available, num_clients, rng):
        k = self.count(num_clients)
        available = list(available)
        if len(available) <= k:
            return sorted(available)
        chosen = rng.choice(len(available), size=k, replace=False)
        return sorted(available[i] for i in chosen)


@dataclass
class AllSelection(Selection):
    """Every available client takes part."""

    name: str = "all"

    def select(self, round_, available, num_clients, rng):
        return sorted(available)
