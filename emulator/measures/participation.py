"""Participation statistics of a realised run: the FedSUM delay metrics (docs/algorithms/fedsum.md 2.1).

Given the active sets S^0, S^1, ... (t 0-based: the clients whose update was merged in
aggregation t; in clients.csv, weight > 0):
  s_i^{-1} = -1;  s_i^t = t if i in S^t else s_i^{t-1}          (Eq. (3), last selection)
  tau^t = t - min_i s_i^t                                        (Eq. (4), per-round delay)
  tau_max = max_t tau^t,  tau_avg = mean_t tau^t.
"""
from __future__ import annotations

import numpy as np


def delay_metrics(active, num_clients: int) -> dict:
    """`active`: a sequence (one per aggregation) of client-id collections or bool masks."""
    s = np.full(num_clients, -1, dtype=np.int64)
    tau = np.zeros(len(active), dtype=np.int64)
    for t, S in enumerate(active):
        S = np.asarray(S)
        if S.dtype == bool:
            s[S] = t
        elif S.size:
            s[S.astype(np.int64)] = t
        tau[t] = t - s.min()
    return {"tau": tau, "tau_max": int(tau.max()) if len(tau) else 0,
            "tau_avg": float(tau.mean()) if len(tau) else 0.0, "last_selected": s}
