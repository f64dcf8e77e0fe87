"""Mini-batch indices of a job, from its own keyed stream (docs/architecture.md section 3).

Epoch-style sampling: each pass over the client's samples is a fresh permutation cut into
batches of `batch_size` (the last, partial batch is kept); passes repeat as long as steps
remain. `batch_size=None` or >= the client's size gives the full local batch every step.
The same (client, round, task, tag) key always gives the same batches, whichever executor
runs the job and in whatever order.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


def batch_plan(n: int, steps: int, batch_size: Optional[int], rng: np.random.Generator) -> list:
    """`steps` arrays of local row numbers in [0, n)."""
    if steps <= 0:
        return []
    if batch_size is None or batch_size >= n:
        full = np.arange(n)
        return [full] * steps
    out = []
    while len(out) < steps:
        perm = rng.permutation(n)
        for s in range(0, n, batch_size):
            out.append(perm[s:s + batch_size])
            if len(out) == steps:
                break
    return out


def steps_per_epoch(n: int, batch_size: Optional[int]) -> int:
    if batch_size is None or batch_size >= n:
        return 1
    return -(-n // batch_size)
