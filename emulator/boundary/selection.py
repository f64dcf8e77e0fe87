"""A selector's choice, checked where it crosses into the engine (docs/selection.md): client
ids (integers), distinct, among `ctx.available`; aggregation weights, when given, one per id,
positive and finite. A violation is a `ContractError` naming the selector (its registered
name, class and file), `select`, and the round."""
from __future__ import annotations

import numpy as np

from devices.selectors import Chosen

from ..errors import ContractError
from .component import describe


#: from this many available clients, membership is looked up by bisection (the protocol's
#: `available` lists ids ascending), not by a pass over them (docs/performance.md, Fleet scale)
BISECT_FROM = 4096


def among(ids: np.ndarray, avail) -> np.ndarray:
    """Whether each id is among the available ids: O(k log n) for a large fleet's ascending
    `avail`, else np.isin."""
    avail = np.asarray(avail)
    if len(avail) < BISECT_FROM or not len(ids):
        return np.isin(ids, avail)
    at = np.minimum(np.searchsorted(avail, ids), len(avail) - 1)
    return avail[at] == ids


class CheckedSelection:
    def __init__(self, selector, name: str):
        self.who = describe("selection model", selector, name)

    def broken(self, t: int, what: str) -> ContractError:
        return ContractError(what, self.who, "select", t)

    def choice(self, got, avail, t: int) -> tuple:
        """The selection as (ascending ids, their weights or None), checked."""
        raw, weights = (got.ids, got.weights) if isinstance(got, Chosen) else (got, None)
        try:
            ids = np.asarray(list(raw))
        except TypeError:
            raise self.broken(t, f"returned {type(got).__name__}; select returns client ids (a list or array of "
                                 "integers) or a Chosen") from None
        if len(ids) and not np.issubdtype(ids.dtype, np.integer):
            raise self.broken(t, f"returned {ids.dtype} values; a selection is client ids (integers)")
        ids = ids.astype(np.int64).reshape(-1)
        inside = among(ids, avail)
        if len(np.unique(ids)) != len(ids) or not inside.all():
            bad = ids[~inside][:5].tolist() or "repeated ids"
            raise self.broken(t, f"returned {bad}; a selection is distinct ids among ctx.available")
        order = np.argsort(ids, kind="stable")
        if weights is None:
            return ids[order].tolist(), None
        wts = np.asarray(list(weights), dtype=np.float64)
        if len(wts) != len(ids) or not (np.isfinite(wts).all() and (wts > 0).all()):
            raise self.broken(t, f"returned {len(wts)} weights for {len(ids)} ids ({wts[:5].tolist()}); weights "
                                 "are positive, finite, one per id")
        return ids[order].tolist(), wts[order].tolist()
