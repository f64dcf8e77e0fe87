"""PowerSGD rank r (Vogels et al. 2019) as the two-phase exchange it is
(docs/algorithms/compression.md 2.6).

Each tensor of two or more dimensions is reshaped to a matrix M (rows = its first dimension)
and approximated with rank r_j = min(r, rows, cols); vectors and scalars travel as they are,
and so does a matrix whose factors would hold as many values, r_j (rows + cols) >= rows cols.
With the shared Q (cols x r_j, warm-started: the average of the clients' Q of the previous
aggregation; i.i.d. standard normal before the first), for the clients i it reads:

    P_i = M_i Q                         (phase 1, up: rows x r_j fp32 values)
    P̂   = orthonormalise(mean_i P_i)    (Gram-Schmidt; phase 2, down: rows x r_j)
    Q_i = M_iᵀ P̂                        (phase 2, up: cols x r_j)
    the server decodes M_i as P̂ Q_iᵀ; the next aggregation's Q is mean_i Q_i
                                        (a column of it that is all zero keeps the previous Q's)

P, P̂ and the Q's travel in fp32 (rounded so). The decoded value is linear in Q_i, so the
algorithm's weighted mean of the decoded uploads is P̂ (sum_i w_i Q_i)ᵀ: PowerSGD's decoding
with the algorithm's own weights. Error feedback (the engine's, compression.md 1.2) keeps
e_i = M_i - P̂ Q_iᵀ: what the client's own message lost.
"""
from __future__ import annotations

import torch
from pydantic import Field

from ..registry import Params, register
from .base import FeedbackCodec
from .exchange import ExchangeBytes, ExchangeCodec


class PowerSGDParams(Params):
    rank: int = Field(2, ge=1, le=4096, description="r: the rank of each matrix's approximation (at most min(rows, cols) of that matrix)")
    error_feedback: bool = Field(True, description="keep what the approximation leaves out and add it to the next upload (Vogels et al. 2019, Algorithm 2)")


def _fp32(x: torch.Tensor) -> torch.Tensor:
    """Values as they travel: rounded to fp32 (computed in float64)."""
    return x.to(torch.float32).to(torch.float64)


def orthonormalise(p: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt on the columns of p (the paper's ORTHOGONALIZE); a column with nothing left
    after the earlier ones are removed stays zero."""
    q = p.clone()
    for i in range(q.shape[1]):
        col = q[:, i]
        for j in range(i):
            col = col - (q[:, j] @ col) * q[:, j]
        norm = col.norm()
        q[:, i] = col / norm if norm > 0 else torch.zeros_like(col)
    return q


def _warm(q_new: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The next aggregation's Q: the new one, but a column that came back all zero (a zero
    column of P̂, or Q_i that cancel) keeps the previous Q's column; a zero column of Q would
    make P's column zero, and so the next Q's, for ever."""
    dead = (q_new == 0).all(0)
    return torch.where(dead, q, q_new) if bool(dead.any()) else q_new


class PowerSGD(FeedbackCodec, ExchangeCodec):
    """PowerSGD rank r (Vogels et al. 2019): P = M Q up, the orthonormalised mean P̂ down, Q = Mᵀ P̂ up."""

    def _rank(self, mat):
        """r_j of a piece (rows, cols), or None when it travels as it is: a vector or a scalar
        (None), or a matrix whose factors hold as many values as it does, r_j (rows + cols) >=
        rows cols (as PyTorch's PowerSGD hook decides which tensors to compress)."""
        if mat is None:
            return None
        r = min(self.p.rank, mat[0], mat[1])
        return r if r * (mat[0] + mat[1]) < mat[0] * mat[1] else None

    def _matrices(self, layout) -> list:
        """(rows, cols, r_j) of each matrix of the upload that is compressed, in order."""
        return [(m[0], m[1], self._rank(m)) for _, m in layout.pieces() if self._rank(m) is not None]

    def exchange_bytes(self, layout, bytes_per_param):
        mats = self._matrices(layout)
        p = sum(rows * r for rows, _, r in mats)
        q = sum(cols * r for _, cols, r in mats)
        plain = sum(n for n, m in layout.pieces() if self._rank(m) is None) + layout.extra
        return ExchangeBytes(broadcast=4 * q, first=4 * p + int(bytes_per_param) * plain, back=4 * p, second=4 * q)

    def initial_state(self, layout, rng):
        return [_fp32(torch.from_numpy(rng.standard_normal((cols, r)))) for _, cols, r in self._matrices(layout)]

    def exchange(self, ps, layout, state):
        pieces = layout.pieces()
        parts = [p.detach().to(torch.float64).split([n for n, _ in pieces]) for p in ps]
        out = [[] for _ in ps]
        qs = iter(state)
        new_state = []
        for j, (_, mat) in enumerate(pieces):
            if self._rank(mat) is None:                 # a vector, a scalar, a small matrix: as it is
                for i, part in enumerate(parts):
                    out[i].append(part[j])
                continue
            q = next(qs).to(device=parts[0][j].device, dtype=torch.float64)   # where the uploads are
            ms = [part[j].reshape(mat) for part in parts]
            p_hat = _fp32(orthonormalise(torch.stack([_fp32(m @ q) for m in ms]).mean(0)))
            q_i = [_fp32(m.T @ p_hat) for m in ms]
            for i, qi in enumerate(q_i):
                out[i].append((p_hat @ qi.T).reshape(-1))
            new_state.append(_warm(_fp32(torch.stack(q_i).mean(0)), q))
        return [torch.cat(o).to(device=p.device, dtype=p.dtype) for o, p in zip(out, ps)], new_state


register("codec", "powersgd", PowerSGDParams,
         "PowerSGD rank r (Vogels et al. 2019): a two-phase exchange (P up, orthonormalised mean P down, "
         "Q up), warm-started Q, error feedback; `rounds` protocol", PowerSGD)
