"""The container every dataset factory returns and every partitioner fills in."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


@dataclass
class FederatedData:
    """A dataset split for federated training.

    x_train / y_train hold every training sample (float32 features, int64 labels);
    client_indices[k] are the rows of client k. Datasets with their own per-device split
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
    client_indices: Optional[list] = None
    natural: bool = False                   # the dataset owns a per-device split
    extra: dict = field(default_factory=dict)

    @property
    def num_train(self) -> int:
        return int(len(self.y_train))

    def client_sizes(self) -> np.ndarray:
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)

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
