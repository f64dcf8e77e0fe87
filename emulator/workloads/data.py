"""The container every dataset factory returns and every partitioner fills in."""
from __future__ import annotations

import operator
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np


class _Bounded(Sequence):
    """A sequence of clients whose rows are delimited by `bounds` (client k: `bounds[k]` ..
    `bounds[k + 1] - 1`); subclasses say what they hand out for that range."""

    __slots__ = ("bounds",)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, k):
        n = len(self)
        k = operator.index(k)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(f"client {k} of {n}")
        return self._rows(int(self.bounds[k]), int(self.bounds[k + 1]))

    @abstractmethod
    def _rows(self, start: int, end: int) -> np.ndarray:
        """The rows of the client whose range is start .. end - 1."""


class RowRanges(_Bounded):
    """Client indices of a data set stored client after client: client k's rows are
    `bounds[k]` .. `bounds[k + 1] - 1`, handed out as a fresh `np.arange` (int64) when asked.
    One int64 per client instead of an index array each (about 0.4 KB a client at 40 rows:
    docs/client-state.md)."""

    __slots__ = ()

    def __init__(self, sizes):
        sizes = np.asarray(sizes, dtype=np.int64)
        self.bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.bounds[1:])

    def _rows(self, start: int, end: int) -> np.ndarray:
        return np.arange(start, end, dtype=np.int64)


class IndexRows(_Bounded):
    """Client indices of a partition: every client's rows in one flat int64 array, client k's
    being `rows[bounds[k]:bounds[k + 1]]` (a view), instead of an array object per client."""

    __slots__ = ("rows",)

    def __init__(self, per_client):
        sizes = np.fromiter((len(ix) for ix in per_client), dtype=np.int64, count=len(per_client))
        self.bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.bounds[1:])
        self.rows = np.concatenate([np.asarray(ix, dtype=np.int64) for ix in per_client]) if len(sizes) else \
            np.zeros(0, np.int64)

    def _rows(self, start: int, end: int) -> np.ndarray:
        return self.rows[start:end]


@dataclass
class FederatedData:
    """A dataset split for federated training.

    x_train / y_train hold every training sample (float32 features, int64 labels);
    client_indices[k] are the rows of client k (a list of int64 arrays, or a `RowRanges` where
    each client's rows follow the previous client's). Datasets with their own per-device split
    (synthetic, quadratic) fill client_indices themselves (`natural`); centralised
    datasets leave it None for a partitioner to fill.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    input_shape: tuple
    task: str = "classification"            # classification | quadratic
    client_indices: Optional[Sequence] = None
    natural: bool = False                   # the dataset owns a per-device split
    extra: dict = field(default_factory=dict)

    @property
    def num_train(self) -> int:
        return int(len(self.y_train))

    @property
    def keyed(self) -> bool:
        """Each device's rows are generated when it first trains (workloads/keyed.py)."""
        from .keyed import KeyedRows
        return isinstance(self.client_indices, KeyedRows)

    def client_sizes(self) -> np.ndarray:
        ix = self.client_indices
        if isinstance(ix, (RowRanges, IndexRows)):
            return np.diff(ix.bounds)
        if self.keyed:
            return ix.client_sizes()
        return np.array([len(i) for i in ix], dtype=np.int64)

    def label_histograms(self) -> np.ndarray:
        """(clients, classes) label counts."""
        h = np.zeros((len(self.client_indices), self.num_classes), dtype=np.int64)
        for k, ix in enumerate(self.client_indices):
            if len(ix):
                h[k] = np.bincount(self.y_train[ix], minlength=self.num_classes)[: self.num_classes]
        return h


def stratified_split(y: np.ndarray, test_fraction: float, rng: np.random.Generator):
    """Indices (train, test) with `test_fraction` of every class held out (rounded per class)."""
    train, test = [], []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        idx = idx[rng.permutation(len(idx))]
        k = int(round(test_fraction * len(idx)))
        test.append(idx[:k])
        train.append(idx[k:])
    train = np.sort(np.concatenate(train))
    test = np.sort(np.concatenate(test))
    return train, test
