"""Weighted sampling without replacement by successive draws (docs/algorithms/selection.md
section 0), and where its uniforms come from.

WSWOR(items, w, m): m times, normalise the weights of the items not yet taken, draw
u ~ U[0, 1) and take the first item whose cumulative normalised weight is strictly greater
than u (Eq. 0.1). The same law as numpy's `choice(replace=False, p=...)`. Items of weight 0
are never taken; when at most m items have a positive weight, all of those are taken (in
position order, with no draw).

Done without renormalising m times (10^5 items, m up to thousands): the pick is the first
item whose cumulative weight among the items left exceeds u x (the weight left), found by
descending a Fenwick tree of the weights (O(log n) a draw); a taken item's weight is removed
from the tree (O(log n)).
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np


class Uniforms:
    """U[0, 1) draws: from `rng` (the run's selection stream), or an injected sequence (tests,
    hand-checked cases); an injected sequence that runs out is an error."""

    def __init__(self, rng: Optional[np.random.Generator] = None, values: Optional[Iterable[float]] = None):
        self.rng = rng
        self._it = None if values is None else iter(list(values))

    def __call__(self) -> float:
        if self._it is not None:
            try:
                return float(next(self._it))
            except StopIteration:
                raise RuntimeError("the injected uniforms ran out") from None
        return float(self.rng.random())


def wswor(weights, m: int, draw: Uniforms) -> np.ndarray:
    """Positions (into `weights`) of m successive weighted draws without replacement, in draw
    order (Eq. 0.1)."""
    w = np.asarray(weights, dtype=np.float64)
    w = np.where(w > 0, w, 0.0)
    positive = int(np.count_nonzero(w))
    if m >= positive:                       # every item with a weight is taken: no draw needed
        return np.flatnonzero(w).astype(np.int64)
    n = len(w)
    C = np.concatenate([[0.0], np.cumsum(w)])
    at = np.arange(1, n + 1)
    tree = C[at] - C[at - (at & -at)]                 # Fenwick tree: node i sums (i - lowbit(i), i]
    left = w.copy()
    remaining = float(C[-1])
    top = 1 << (n.bit_length() - 1)
    out = np.empty(int(m), dtype=np.int64)
    for d in range(int(m)):
        target = draw() * remaining
        pos, step = 0, top                   # the largest prefix <= target: the pick is the next item
        while step:
            nxt = pos + step
            if nxt <= n and tree[nxt - 1] <= target:
                pos = nxt
                target -= tree[nxt - 1]
            step >>= 1
        j = _free_from(left, pos)
        out[d] = j
        wj = float(left[j])
        left[j] = 0.0
        remaining -= wj
        i = j + 1
        while i <= n:
            tree[i - 1] -= wj
            i += i & -i
    return out


def _free_from(left: np.ndarray, j: int) -> int:
    """`j`, or (float rounding at a boundary) the nearest item still holding weight."""
    n = len(left)
    k = j
    while k < n and left[k] <= 0.0:
        k += 1
    if k < n:
        return k
    k = min(j, n - 1)
    while k >= 0 and left[k] <= 0.0:
        k -= 1
    return k
