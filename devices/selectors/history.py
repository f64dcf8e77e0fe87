"""What the fleet has shown so far (docs/selection.md, "History"): per client, its last
observed round and the totals over its rounds; the engine writes it after each aggregation
(`record`), selectors read it through their context. Columns grown on first write
(`ClientColumns`): memory is proportional to the clients that ever took part.

Fields (a client never observed reads the fill in brackets):
  round [0]          the last round it was selected in and observed
  count [0]          rounds it was observed in; `aggregated` [0] of them aggregated
  status [-1]        its last `Status` (0 aggregated, 1 straggler, 2 dropped)
  t_down, t_comp, t_up, total [NaN]   its last round's seconds (RoundOutcomes)
  total_sum [0]      the sum of its `total` over the rounds observed (mean = total_sum / count)
  met_deadline, cut [False]           its last round's
  loss_round [0]     the last round its loss statistics were taken (it was aggregated)
  loss_n [0], loss_sum, loss_sq [NaN], unique [0], last_n [0], last_sq, ema_sq [NaN]
                     those statistics (RoundOutcomes)
"""
from __future__ import annotations

import numpy as np

from .columns import ClientColumns

FIELDS = {
    "round": (np.int64, 0), "count": (np.int64, 0), "aggregated": (np.int64, 0), "status": (np.int8, -1),
    "t_down": (np.float64, np.nan), "t_comp": (np.float64, np.nan), "t_up": (np.float64, np.nan),
    "total": (np.float64, np.nan), "total_sum": (np.float64, 0.0),
    "met_deadline": (bool, False), "cut": (bool, False),
    "loss_round": (np.int64, 0), "loss_n": (np.float64, 0.0), "loss_sum": (np.float64, np.nan),
    "loss_sq": (np.float64, np.nan), "unique": (np.int64, 0), "last_n": (np.float64, 0.0),
    "last_sq": (np.float64, np.nan), "ema_sq": (np.float64, np.nan),
}
LAST = ("status", "t_down", "t_comp", "t_up", "total", "met_deadline", "cut")
LOSS = ("loss_n", "loss_sum", "loss_sq", "unique", "last_n", "last_sq", "ema_sq")


class History:
    """Read: `get(field, ids)`, `seen(ids)`, `ids`, `n`, `nbytes`. Written by the engine only
    (`record`)."""

    def __init__(self):
        self._c = ClientColumns(FIELDS)

    @property
    def ids(self) -> np.ndarray:
        """The clients observed so far (in the order they were first observed)."""
        return self._c.ids

    @property
    def n(self) -> int:
        return self._c.n

    @property
    def nbytes(self) -> int:
        return self._c.nbytes

    def seen(self, ids) -> np.ndarray:
        return self._c.seen(ids)

    def get(self, name: str, ids) -> np.ndarray:
        """Field `name` of these clients (a copy; see the module doc for fields and fills)."""
        return self._c.get(name, ids)

    def mean_total(self, ids) -> np.ndarray:
        """The mean of each client's observed `total` (NaN: never observed)."""
        c = self._c.get("count", ids)
        s = self._c.get("total_sum", ids)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(c > 0, s / np.maximum(c, 1), np.nan)

    def record(self, o) -> None:
        """The engine: one round's outcomes (RoundOutcomes)."""
        ids = np.asarray(o.ids, dtype=np.int64)
        if not len(ids):
            return
        c = self._c
        c.put("round", ids, o.round)
        c.add("count", ids, 1)
        agg = o.status == 0
        c.add("aggregated", ids, agg.astype(np.int64))
        for name in LAST:
            c.put(name, ids, getattr(o, name))
        c.add("total_sum", ids, np.nan_to_num(o.total, nan=0.0))
        has = agg & (np.asarray(o.loss_n) > 0)
        if has.any():
            c.put("loss_round", ids[has], o.round)
            for name in LOSS:
                c.put(name, ids[has], np.asarray(getattr(o, name))[has])
