"""Per-client columns grown on first write (docs/selection.md, "History"): memory is
proportional to the clients ever written, not to the fleet.

A client gets a slot the first time one of its values is written; each column is an array
indexed by slot, its capacity doubled as slots are added. Lookups are vectorised: the ids
are kept sorted beside their slots (`np.searchsorted`), so reading 10^5 clients' values is a
few NumPy calls, not a Python loop. Selectors keep their own per-client state in one too.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np


class ClientColumns:
    """Columns `spec` = {name: (dtype, fill)}; `fill` is what a client never written reads."""

    def __init__(self, spec: Mapping[str, tuple]):
        self.spec = dict(spec)
        self._cap = 0
        self.n = 0                                        # clients written so far
        self._ids = np.zeros(0, dtype=np.int64)           # slot -> client
        self._sorted = np.zeros(0, dtype=np.int64)        # ids ascending ...
        self._sorted_slots = np.zeros(0, dtype=np.int64)  # ... and their slots
        self._cols = {k: np.zeros(0, dtype=t) for k, (t, _) in self.spec.items()}

    # -- slots ------------------------------------------------------------------------
    @property
    def ids(self) -> np.ndarray:
        """The clients written so far, in the order they were first written."""
        return self._ids[:self.n].copy()

    def slots(self, ids) -> np.ndarray:
        """Slot of each client (-1: never written)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not self.n or not len(ids):
            return np.full(len(ids), -1, dtype=np.int64)
        if len(ids) == self.n and ids[0] == self._sorted[0] and np.array_equal(ids, self._sorted):
            return self._sorted_slots.copy()           # every client written, asked in id order
        pos = np.searchsorted(self._sorted, ids)
        pos_c = np.minimum(pos, self.n - 1)
        found = self._sorted[pos_c] == ids
        return np.where(found, self._sorted_slots[pos_c], -1)

    def seen(self, ids) -> np.ndarray:
        return self.slots(ids) >= 0

    def _grow(self, need: int) -> None:
        if need <= self._cap:
            return
        cap = max(need, 2 * self._cap, 16)
        for k, (t, fill) in self.spec.items():
            col = np.full(cap, fill, dtype=t)
            col[:self.n] = self._cols[k][:self.n]
            self._cols[k] = col
        ids = np.zeros(cap, dtype=np.int64)
        ids[:self.n] = self._ids[:self.n]
        self._ids = ids
        self._cap = cap

    def _slots_adding(self, ids: np.ndarray) -> np.ndarray:
        """Slots of `ids` (unique), giving new clients the next slots in ascending id."""
        s = self.slots(ids)
        new = np.unique(ids[s < 0])
        if len(new):
            self._grow(self.n + len(new))
            ns = np.arange(self.n, self.n + len(new), dtype=np.int64)
            self._ids[self.n:self.n + len(new)] = new
            at = np.searchsorted(self._sorted, new)
            self._sorted = np.insert(self._sorted, at, new)
            self._sorted_slots = np.insert(self._sorted_slots, at, ns)
            self.n += len(new)
            s = self.slots(ids)
        return s

    # -- values -----------------------------------------------------------------------
    def get(self, name: str, ids) -> np.ndarray:
        """Column `name` of these clients (a copy; `fill` for clients never written)."""
        return self.take(name, self.slots(ids))

    def take(self, name: str, slots: np.ndarray) -> np.ndarray:
        """Column `name` at these slots (`slots(ids)`; -1 reads `fill`): one lookup, many columns."""
        t, fill = self.spec[name]
        col = self._cols[name]
        if len(slots) and slots.min() >= 0:
            return col[slots]
        out = np.full(len(slots), fill, dtype=t)
        hit = slots >= 0
        out[hit] = col[slots[hit]]
        return out

    def put(self, name: str, ids, values) -> None:
        """Write column `name` of these clients (distinct ids)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return
        s = self._slots_adding(ids)
        self._cols[name][s] = values

    def add(self, name: str, ids, values) -> None:
        """Add to column `name` of these clients (distinct ids)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return
        s = self._slots_adding(ids)
        self._cols[name][s] += values

    def column(self, name: str) -> np.ndarray:
        """Column `name` of every client written (in `ids` order; a read-only view)."""
        v = self._cols[name][:self.n].view()
        v.setflags(write=False)
        return v

    @property
    def nbytes(self) -> int:
        """Bytes held (columns at their capacity, ids and the sorted index)."""
        return int(sum(c.nbytes for c in self._cols.values()) + self._ids.nbytes
                   + self._sorted.nbytes + self._sorted_slots.nbytes)
