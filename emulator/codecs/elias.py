"""QSGD's entropy-coded size (docs/algorithms/compression.md 2.2, "Elias-coded size"): the bits
of Alistarh et al. 2017's coding of a quantised message, counted from its integer levels.

Each bucket is sent as its fp32 norm (32 bits), then, for each nonzero level in order, the
Elias omega code of the gap to it (its 1-based position for the first), one sign bit and the
Elias omega code of the level; a last gap, to the position one past the bucket's end, tells
the receiver that the bucket has no further nonzero (flemu's choice: the paper leaves the
end of a bucket implicit). Reported, never timed: a message's time follows its fixed-width
size (compression.md 2)."""
from __future__ import annotations

import numpy as np


def omega_bits(x: np.ndarray) -> np.ndarray:
    """The length in bits of the Elias omega code of each positive integer in `x`:
    len(1) = 1; for n > 1, the bits of n (floor(log2 n) + 1) plus len of floor(log2 n)'s
    prefix, down to 1, plus the terminating 0: len(2) = len(3) = 3, len(4) = 6, len(8) = 7."""
    n = np.asarray(x, dtype=np.int64).copy()
    if (n < 1).any():
        raise ValueError("Elias omega codes positive integers")
    bits = np.ones(n.shape, dtype=np.int64)             # the terminating 0
    while (n > 1).any():
        big = n > 1
        width = np.frexp(n.astype(np.float64))[1]        # bit length of n (exact below 2^53)
        bits += np.where(big, width, 0)
        n = np.where(big, width - 1, n)                  # floor(log2 n)
    return bits


def qsgd_bits(levels: np.ndarray, lengths: np.ndarray) -> int:
    """Bits of a QSGD message: `levels` (buckets x b, integer levels 0..s, the short last
    bucket padded with zeros), `lengths` each bucket's true length."""
    rows, cols = np.nonzero(levels)                      # row-major: bucket by bucket, in order
    pos = cols.astype(np.int64) + 1
    first = np.ones(len(pos), dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    prev = np.zeros(len(pos), dtype=np.int64)
    prev[1:] = pos[:-1]
    gaps = np.where(first, pos, pos - prev)
    last = np.zeros(levels.shape[0], dtype=np.int64)
    np.maximum.at(last, rows, pos)
    end = np.asarray(lengths, dtype=np.int64) + 1 - last           # the gap past the bucket's end
    lv = levels[rows, cols].astype(np.int64)
    return int(32 * levels.shape[0] + omega_bits(gaps).sum() + omega_bits(end).sum()
               + len(lv) + omega_bits(lv).sum())
