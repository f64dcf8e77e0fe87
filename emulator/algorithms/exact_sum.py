"""An exact running sum of vectors (a long accumulator), for sums over all N clients' rows.

`ExactSum` holds sum_i v_i exactly, whatever the order in which rows are added and removed:
every float (float32 or float64) is an integer mantissa times a power of two (read from its
IEEE bits: exponent field e, fraction f; mant = f + 2^m if e > 0), so the sum is a
long fixed-point integer, kept per coordinate as L int64 limbs of 32 bits (a Kulisch-style
long accumulator). Adding or subtracting a row is exact integer arithmetic, so the value read
depends only on the rows present now, never on the history of writes, their order, or how the
rows are laid out in memory: a store that keeps only the rows written and a dense [N, d] table
give the same bits.

Reading (`value`) rounds once: the limbs (non-overlapping 32-bit pieces) are added from the
most significant down in float64, then rounded to the table's dtype; a deterministic function
of the exact sum, within one float64 rounding of it. Non-finite inputs are counted apart
(+inf, -inf, NaN per coordinate) and give the IEEE result of a sum (NaN, or +-inf).

Memory: L x d x 8 bytes (L = 12 for float32 rows, 69 for float64), plus 3 x d x 8 bytes of
counters once a non-finite value has been added.
"""
from __future__ import annotations

import math

import torch

_W = 32                                  # bits per limb
_MASK = (1 << _W) - 1
_CHUNK = 1 << 17                         # values converted at once (bounds the temporaries to ~1 MB each)
_SPLIT = 26                              # a float64 mantissa (53 bits) is added in two parts
_LAYOUT = {torch.float32: (torch.int32, 23, 8), torch.float64: (torch.int64, 52, 11)}   # bits, mantissa, exponent


def _pow2(e: int) -> float:
    try:
        return math.ldexp(1.0, e)
    except OverflowError:                # a limb above float64's range: the sum overflows
        return math.inf


class ExactSum:
    def __init__(self, dim: int, dtype: torch.dtype, device: torch.device):
        if dtype not in _LAYOUT:
            raise ValueError(f"exact sums of {dtype} rows are not supported (float32, float64)")
        self._int, self._m, ebits = _LAYOUT[dtype]
        self._emask, self._fmask = (1 << ebits) - 1, (1 << self._m) - 1
        self.dtype, self.device = dtype, device
        # bit 0 of the accumulator is the smallest subnormal, 2^(1 - ebias - m)
        self._bias = (1 << (ebits - 1)) - 1 + self._m - 1
        top = self._emask + self._m + 1 + 64         # the largest value's top bit, with room for 2^64 rows
        self.limbs = -(-top // _W) + 1
        self._acc = torch.zeros(self.limbs, dim, dtype=torch.int64, device=device)
        self._special = None             # [3, d] counts of +inf, -inf, NaN (allocated at the first one)
        self._scale = [_pow2(_W * k - self._bias) for k in range(self.limbs)]

    @property
    def nbytes(self) -> int:
        return int(self._acc.numel() * 8 + (0 if self._special is None else self._special.numel() * 8))

    def add(self, rows: torch.Tensor, sign: int = 1) -> None:
        """Add (sign 1) or subtract (sign -1) each row of `rows` ([k, d] or [d]) exactly."""
        v = rows.detach().to(device=self.device, dtype=self.dtype).reshape(-1, self._acc.shape[1])
        step = max(1, _CHUNK // v.shape[1])                     # bounded temporaries: ~_CHUNK int64 each
        for i in range(0, v.shape[0], step):
            self._add(v[i:i + step], sign)
        self._normalise()

    def _add(self, v: torch.Tensor, sign: int) -> None:
        bits = v.view(self._int).to(torch.int64)                 # IEEE fields of each value
        ex = (bits >> self._m) & self._emask
        special = ex == self._emask
        if bool(special.any()):                                  # +-inf, NaN: counted apart
            if self._special is None:
                self._special = torch.zeros(3, v.shape[1], dtype=torch.int64, device=self.device)
            self._special[0] += sign * (v == math.inf).sum(0)
            self._special[1] += sign * (v == -math.inf).sum(0)
            self._special[2] += sign * torch.isnan(v).sum(0)
            bits = torch.where(special, torch.zeros_like(bits), bits)
            ex = torch.where(special, torch.zeros_like(ex), ex)
        mant = (bits & self._fmask) | ((ex > 0).to(torch.int64) << self._m)   # v = +-mant 2^(max(ex,1) - 1 - bias)
        mant = torch.where(bits < 0, -sign * mant, sign * mant)
        pos = ex.clamp_(min=1) - 1                               # accumulator bit of mant's bit 0
        parts = ((mant, pos),) if self._m < _W else (
            (mant & ((1 << _SPLIT) - 1), pos), (mant >> _SPLIT, pos + _SPLIT))   # float64: two parts
        for part, p in parts:
            shifted = part << (p & (_W - 1))                     # |.| < 2^(27 + 31)
            k = p >> 5
            self._acc.scatter_add_(0, k, shifted & _MASK)
            self._acc.scatter_add_(0, k + 1, shifted >> _W)

    def _normalise(self) -> None:
        """Carry so that limbs 0..L-2 lie in [0, 2^32) and the top limb holds the sign."""
        a = self._acc
        for k in range(self.limbs - 1):
            carry = a[k] >> _W                                   # floor: also borrows
            a[k] -= carry << _W
            a[k + 1] += carry

    def value(self) -> torch.Tensor:
        """The sum, rounded once (see the module doc), in the rows' dtype."""
        a = self._acc
        neg = a[-1] < 0
        mag = torch.where(neg, -a, a)
        if bool(neg.any()):                                      # negate: carry again, per column
            mag = mag.clone()
            for k in range(self.limbs - 1):
                carry = mag[k] >> _W
                mag[k] -= carry << _W
                mag[k + 1] += carry
        out = torch.zeros(a.shape[1], dtype=torch.float64, device=self.device)
        for k in range(self.limbs - 1, -1, -1):                  # most significant limb first
            lk = mag[k]
            nz = lk != 0
            if bool(nz.any()):
                out += torch.where(nz, lk.to(torch.float64) * self._scale[k], 0.0)
        out = torch.where(neg, -out, out)
        if self._special is None:
            return out
        pinf, ninf, nan = (self._special[i] > 0 for i in range(3))
        out = torch.where(pinf, math.inf, out)
        out = torch.where(ninf, -math.inf, out)
        out = torch.where(nan | (pinf & ninf), math.nan, out)
        return out

    def mean(self, n: int) -> torch.Tensor:
        """sum / n: the float64 value of the sum divided by n, rounded to the rows' dtype."""
        return (self.value() / n).to(self.dtype)
