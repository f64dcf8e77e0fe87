"""The Recorder: metrics rows per aggregation, per-client-per-round columns, optional events.

Per-round client data is columnar (one NumPy array per column over all clients), so a
10,000-client fleet costs a few arrays per round, not 10,000 dicts.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

CLIENT_COLUMNS = {  # name -> (dtype, default)
    "available": (bool, False),
    "selected": (bool, False),
    "steps": (np.int64, 0),
    "compute_time": (np.float64, 0.0),
    "comm_time": (np.float64, 0.0),
    "dropped": (bool, False),
    "weight": (np.float64, 0.0),
    "bytes_up": (np.int64, 0),
    "bytes_down": (np.int64, 0),
}


class RoundLog:
    """Per-client columns of one round (and one model in multi-model runs)."""

    def __init__(self, round_: int, num_clients: int, task: int = 0):
        self.round, self.task, self.n = round_, task, num_clients
        self.cols = {k: np.full(num_clients, d, dtype=t) for k, (t, d) in CLIENT_COLUMNS.items()}
        self.extra: dict[str, np.ndarray] = {}
        self.drop_reason: dict[int, str] = {}
        self.messages = []   # (numel, bytes) of every completed transfer, for the invariant check

    def __getattr__(self, k):
        cols = self.__dict__.get("cols")
        if cols is not None and k in cols:
            return cols[k]
        raise AttributeError(k)

    def set_extra(self, name: str, client: int, value, dtype=np.float64, default=np.nan):
        if name not in self.extra:
            self.extra[name] = np.full(self.n, default, dtype=dtype)
        self.extra[name][client] = value

    def drop(self, client: int, reason: str):
        self.cols["dropped"][client] = True
        self.drop_reason[client] = reason

    def frame(self, participants_only: bool) -> pd.DataFrame:
        cols = dict(self.cols)
        reason = np.full(self.n, "", dtype=object)
        for c, r in self.drop_reason.items():
            reason[c] = r
        df = pd.DataFrame({"round": self.round, "client": np.arange(self.n), **cols,
                           "drop_reason": reason, **self.extra})
        if participants_only:
            df = df[df["selected"]]
        return df


class Recorder:
    def __init__(self, num_clients: int, participants_only: bool = False, events: bool = False,
                 multi_model: bool = False):
        self.num_clients = num_clients
        self.participants_only = participants_only
        self.multi_model = multi_model
        self.metrics: list[dict] = []
        self.rounds: list[RoundLog] = []
        self.events: Optional[list] = [] if events else None

    def round_log(self, round_: int, task: int = 0) -> RoundLog:
        log = RoundLog(round_, self.num_clients, task)
        self.rounds.append(log)
        return log

    def metric(self, row: dict) -> None:
        self.metrics.append(row)

    def event(self, time: float, client: int, state: str, round_: int, detail: str = "") -> None:
        if self.events is not None:
            self.events.append((time, client, state, round_, detail))

    def metrics_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.metrics)

    def clients_frame(self) -> pd.DataFrame:
        if not self.rounds:
            return pd.DataFrame(columns=["round", "client", *CLIENT_COLUMNS, "drop_reason"])
        frames = []
        for log in self.rounds:
            f = log.frame(self.participants_only)
            if self.multi_model:
                f.insert(2, "model", log.task)
            frames.append(f)
        return pd.concat(frames, ignore_index=True)

    def events_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.events or [], columns=["time", "client", "state", "round", "detail"])
