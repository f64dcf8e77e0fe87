"""Named, independent random streams derived from one integer seed (docs/architecture.md section 3).

`Streams(seed).generator("selection")` is one long-lived stream; `keyed("batches", client,
round, model)` is a fresh generator for that key, so the draws for one key never depend on
how many draws other keys made or in which order jobs ran.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

STREAMS = ("partition", "init", "availability", "selection", "compute", "network",
           "batches", "algorithm", "data", "evaluation")


@lru_cache(maxsize=None)
def _name_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


class Streams:
    def __init__(self, seed: int):
        self.seed = int(seed)
        self._gens: dict[tuple, np.random.Generator] = {}

    def seed_sequence(self, name: str, *keys: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=(_name_key(name),) + tuple(int(k) for k in keys))

    def generator(self, name: str, *keys: int) -> np.random.Generator:
        """A long-lived generator for (name, *keys); the same object on every call."""
        key = (name,) + keys
        g = self._gens.get(key)
        if g is None:
            g = self._gens[key] = np.random.default_rng(self.seed_sequence(name, *keys))
        return g

    def keyed(self, name: str, *keys: int) -> np.random.Generator:
        """A fresh generator for (name, *keys): the same draws every time it is asked for."""
        return np.random.default_rng(self.seed_sequence(name, *keys))

    def int_seed(self, name: str, *keys: int) -> int:
        """A 63-bit integer seed for libraries that want one (torch.Generator)."""
        return int(self.seed_sequence(name, *keys).generate_state(1, np.uint64)[0] >> np.uint64(1))
