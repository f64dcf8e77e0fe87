"""Power-of-choice (Cho, Wang & Joshi, AISTATS 2022; docs/algorithms/selection.md section 4):
draw d candidates by data share without replacement (Eq. 4.1), keep the m with the highest
local loss (Eq. 4.2), average them with equal weights 1/m (Eq. 4.3).

Variants: `pow_d` probes each candidate's loss on all its training data, `cpow_d` on
`probe_batch` rows drawn uniformly (both real compute, charged by the engine before the
round), `rpow_d` reads the mean training loss of the candidate's last participation (+inf
never selected: chosen first) and costs nothing; `rand` is the unbiased baseline: m draws by
data share with replacement, each draw weighing 1/m.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .base import Chosen, Selector
from .sampling import Uniforms, wswor

VARIANTS = ("pow_d", "cpow_d", "rpow_d", "rand")


@dataclass
class PowerOfChoiceSelector(Selector):
    d: Optional[int] = None            # candidates; default 2m (pow_d, cpow_d), min(|available|, 10m) (rpow_d)
    variant: str = "pow_d"
    probe_batch: int = 64              # cpow_d: rows per probe
    weights: str = "equal"             # equal (1/m, the authors' code) | samples (the algorithm's own)
    name: str = "power_of_choice"
    draws: Optional[Uniforms] = field(default=None, repr=False)

    def __post_init__(self):
        self.observes = self.reads_loss = self.variant == "rpow_d"

    def candidates(self, ctx, m: int, draw) -> np.ndarray:
        """Eq. 4.1: d available clients by p_i = n_i / sum n (over the available), in draw order."""
        avail = np.asarray(ctx.available, dtype=np.int64)
        d = self.d if self.d is not None else (min(len(avail), 10 * m) if self.variant == "rpow_d" else 2 * m)
        p = np.asarray(ctx.n_samples, dtype=np.float64)[avail]
        return avail[wswor(p, min(d, len(avail)), draw)]

    def losses(self, ctx, A: np.ndarray) -> np.ndarray:
        """F_i of the candidates (Eq. 4.2's ranking key)."""
        if self.variant == "pow_d":
            return ctx.probe_loss(A)
        if self.variant == "cpow_d":
            return ctx.probe_loss(A, self.probe_batch)
        n, s = ctx.history.get("loss_n", A), ctx.history.get("loss_sum", A)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, s / np.where(n > 0, n, 1.0), np.inf)

    def select(self, ctx):
        m = ctx.count()
        avail = np.asarray(ctx.available, dtype=np.int64)
        if not len(avail):
            return []
        draw = self.draws or Uniforms(ctx.rng)
        if self.variant == "rand":
            return self.with_replacement(ctx, avail, m, draw)
        A = self.candidates(ctx, m, draw)
        F = self.losses(ctx, A)
        S = A[np.argsort(-F, kind="stable")[:m]]            # ties: the earlier draw (Eq. 4.2)
        if self.weights == "equal":
            return Chosen(S.tolist(), [1.0 / m] * len(S))     # Eq. 4.3
        return S.tolist()

    @staticmethod
    def with_replacement(ctx, avail, m: int, draw) -> Chosen:
        """`rand`: m draws by data share with replacement; a client drawn j times weighs j / m."""
        p = np.asarray(ctx.n_samples, dtype=np.float64)[avail]
        c = np.cumsum(p) / p.sum()
        picks = np.array([min(int(np.searchsorted(c, draw(), side="right")), len(avail) - 1) for _ in range(m)])
        ids, counts = np.unique(avail[picks], return_counts=True)
        return Chosen(ids.tolist(), (counts / m).tolist())
