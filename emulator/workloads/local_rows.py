"""Each client's local test rows for per-client evaluation (docs/fairness.md, "Local test rows").

- `hold_out`: a share of each client's own partition, drawn from the `evaluation.holdout`
  stream and removed from its training rows (a client keeps at least one row to train on);
- `split_test`: the global test set split among the clients by the workload's partitioner
  (a draw of its own, from the `evaluation.split` stream), or for a data set with its own
  per-device split, the test rows it keeps per device.

Both give a `LocalRows`: one flat array of row numbers, client after client, into the
training arrays (`source = "train"`) or the test arrays (`"test"`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ScenarioError


@dataclass
class LocalRows:
    """Client k's local test rows are `rows[bounds[k]:bounds[k + 1]]`, row numbers into the
    data set's `source` arrays ("train": x_train / y_train, "test": x_test / y_test)."""

    source: str
    rows: np.ndarray        # int64, client after client, ascending within a client
    bounds: np.ndarray      # int64, num_clients + 1

    @classmethod
    def from_lists(cls, source: str, per_client) -> "LocalRows":
        sizes = np.array([len(ix) for ix in per_client], dtype=np.int64)
        bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        rows = np.concatenate([np.asarray(ix, dtype=np.int64) for ix in per_client]) if len(sizes) else \
            np.zeros(0, np.int64)
        return cls(source, rows, bounds)

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def of(self, client: int) -> np.ndarray:
        return self.rows[self.bounds[client]:self.bounds[client + 1]]

    def positions(self, clients: np.ndarray) -> np.ndarray:
        """Positions in `rows` of these clients' rows, client after client (vectorised ranges)."""
        clients = np.asarray(clients, dtype=np.int64)
        lo, n = self.bounds[clients], self.sizes()[clients]
        if not n.sum():
            return np.zeros(0, np.int64)
        starts = np.repeat(lo - np.concatenate(([0], np.cumsum(n)[:-1])), n)
        return starts + np.arange(int(n.sum()))


def _concat(client_indices) -> tuple:
    sizes = np.array([len(ix) for ix in client_indices], dtype=np.int64)
    flat = np.concatenate([np.asarray(ix, dtype=np.int64) for ix in client_indices])
    return flat, sizes


def hold_out(client_indices, fraction: float, rng: np.random.Generator, path: str = "evaluation.holdout") -> tuple:
    """(training rows per client, LocalRows of the held-out rows): client k holds out
    round(fraction x n_k) of its n_k rows (at least 1, at most n_k - 1), a uniform random
    subset: every row of the fleet gets one uniform key from `rng` and each client holds out
    its rows of smallest keys."""
    flat, sizes = _concat(client_indices)
    small = np.flatnonzero(sizes < 2)
    if len(small):
        raise ScenarioError([(path, f"{len(small)} clients (the first: client {int(small[0])}) have fewer than 2 "
                                    "training rows: holding out a test row would leave them none to train on; "
                                    "use rows: test, fewer clients or a less skewed partition")])
    m = np.clip(np.rint(fraction * sizes).astype(np.int64), 1, sizes - 1)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    order = np.lexsort((rng.random(len(flat)), owner))          # each client's rows in random order
    starts = np.repeat(np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    test = (np.arange(len(flat)) - starts) < np.repeat(m, sizes)
    rows, who = flat[order], owner[order]
    keep = np.lexsort((rows[~test], who[~test]))                  # ascending within each client
    train = np.split(rows[~test][keep], np.cumsum(sizes - m)[:-1])
    held = np.lexsort((rows[test], who[test]))
    bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(m, out=bounds[1:])
    return train, LocalRows("train", rows[test][held], bounds)


def split_test(data, partition, num_clients: int, rng: np.random.Generator, path: str = "evaluation.rows") -> LocalRows:
    """The test set split among the clients with the workload's `partition` block (its own
    draw), or the test rows a data set with its own per-device split keeps per device."""
    from ..registry import get
    if partition.name == "natural":
        own = data.extra.get("test_client_indices")
        if own is None:
            raise ScenarioError([(path, f"data set {data.name} keeps no test rows per device; use rows: holdout")])
        return LocalRows.from_lists("test", own)
    try:
        parts = get("partition", partition.name).factory(partition, data.y_test, num_clients, rng, path)
    except ScenarioError as e:
        why = "; ".join(msg for _, msg in e.problems)
        raise ScenarioError([(path, f"splitting the {len(data.y_test)} test rows among {num_clients} clients with "
                                    f"the workload's partition ({partition.name}) fails: {why}; use rows: holdout")])
    return LocalRows.from_lists("test", parts)
