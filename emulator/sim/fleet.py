"""The world's clients as a fleet (docs/performance.md, "Fleet scale"): fleet-wide arrays
(each client's group) and one compute / link / availability object per device group; a
client's `Client` object is made the first time the simulation touches it, and kept (its own
streams live in it). An idle client of a 10^7-device fleet is an entry of a few arrays, not
a Python object."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .client import Client


class Fleet(Sequence):
    """`fleet[c]` is client c's `Client` (made on first use); `group_of[c]` its device group's
    index. `groups[g]` is (group spec, compute, link, availability) of group g; clients of a
    group are contiguous ids from `starts[g]`."""

    def __init__(self, streams, groups: list, counts: list, task_sizes: list, batch_sizes: list, macs: list):
        self.streams = streams
        self.groups = groups
        counts = np.asarray(counts, dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(counts)))
        self.group_of = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        self.names = np.array([g[0].name for g in groups], dtype=object)
        self._sizes, self._batches, self._macs = task_sizes, batch_sizes, macs
        self._made: dict[int, Client] = {}
        self._works: dict = {}                 # (task, batch) -> its Work, shared
        self._maps: dict = {}                  # batches of every task -> task -> Work, shared

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, cid) -> Client:
        cid = int(cid)
        c = self._made.get(cid)
        if c is None:
            if not 0 <= cid < len(self):
                raise IndexError(f"client {cid} of {len(self)}")
            gi = int(self.group_of[cid])
            spec, compute, link, avail = self.groups[gi]
            c = self._made[cid] = Client(cid, spec.name, gi, compute, link, avail, self.streams, spec.energy,
                                         self._work(cid))
        return c

    def __iter__(self):
        return (self[c] for c in range(len(self)))

    @property
    def touched(self) -> int:
        """Clients whose `Client` object exists (the simulation touched them)."""
        return len(self._made)

    def group_names(self, ids=None) -> np.ndarray:
        """Each client's group name (of `ids`, default every client)."""
        return self.names[self.group_of if ids is None else self.group_of[np.asarray(ids, dtype=np.int64)]]

    def members(self, gi: int) -> np.ndarray:
        return np.arange(self.starts[gi], self.starts[gi + 1])

    def _work(self, cid: int) -> dict:
        """task -> devices.compute.Work of this client: one Work per (model, batch), one
        read-only map per combination of batches, shared by every client it fits."""
        from devices.compute import Work
        key = tuple(int(min(b or 10**12, int(s[cid]))) for s, b in zip(self._sizes, self._batches))
        work = self._maps.get(key)
        if work is None:
            work = self._maps[key] = {}
            for task, (m, b) in enumerate(zip(self._macs, key)):
                w = self._works.get((task, b))
                if w is None:
                    w = self._works[(task, b)] = Work(flops_per_step=6.0 * m * b, batch=b)
                work[task] = w
        return work
