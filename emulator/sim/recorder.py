"""The Recorder: metrics rows per aggregation, per-client-per-round columns, optional events.

Per-round client data is columnar (one NumPy array per column), so a 10,000-client fleet
costs a few arrays per round, not 10,000 dicts. A `RoundLog` covers every client (dense:
`rounds`, `intervals`) or only the clients it concerns (`ids`). Its `kind` is declared when it
is made, through the recorder's API, never inferred from its columns:

- ROUND (`round_log`): a round's (or interval's, or one model's) clients; an aggregation's
  log when `aggregation` is set;
- JOB (`job_log`, then `commit`): one client job of a run recorded per job (`async`: the
  protocol declares `records_per_job`); it gets its round when committed: the merge it was
  aggregated in, or for lost work the merge it would have counted toward at the earliest;
- IDLE (`idle_log`): multi-model clients that trained no model this round (`model = -1`
  in clients.csv); no algorithm weighs them.

Only aggregation logs count as rounds in the delay metrics. Columns beyond the fixed ones
(`extra`) are per-protocol or per-algorithm values; `sgd_steps` (SGD steps when `steps`
counts iterations of several) and `job` are written through this API (`record_sgd_steps`,
`job_log`) and read through `sgd_steps_total` and `kind`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ..errors import InvariantError
from .timeline import Timeline, offline_periods, round_offline

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

#: client_eval.csv (per-client evaluation, sim/client_evaluation.py; multi-model runs add `model`)
EVAL_COLUMNS = ("evaluation", "round", "virtual_time", "client", "group", "n", "loss", "acc")

ROUND, JOB, IDLE = "round", "job", "idle"      # RoundLog kinds (module docstring)


class RoundLog:
    """Per-client columns of one round (and one model in multi-model runs). Index columns by
    `log.at(client)` (the client id itself in a dense log)."""

    def __init__(self, round_: int, num_clients: int, task: int = 0, ids=None, aggregation: bool = False,
                 kind: str = ROUND, phases: bool = False):
        self.round, self.task, self.aggregation, self.kind = round_, task, aggregation, kind
        self.num_clients = num_clients
        self.ids = None if ids is None else np.asarray(ids, dtype=np.int64)
        self.n = num_clients if ids is None else len(self.ids)
        self._pos = None                       # client -> row, made on first `at` of a sparse log
        if ids is not None:
            self._order = np.argsort(self.ids, kind="stable")
            self._sorted = self.ids[self._order]
        c = self.cols = {k: np.full(self.n, d, dtype=t) for k, (t, d) in CLIENT_COLUMNS.items()}
        # the same arrays as attributes (log.steps etc.)
        self.available, self.selected, self.steps = c["available"], c["selected"], c["steps"]
        self.compute_time, self.comm_time, self.dropped = c["compute_time"], c["comm_time"], c["dropped"]
        self.weight, self.bytes_up, self.bytes_down = c["weight"], c["bytes_up"], c["bytes_down"]
        # lower bound on each row's compute time from the realised step clock (invariants.py)
        self.min_compute = np.zeros(self.n)
        self.extra: dict[str, np.ndarray] = {}
        self.drop_reason: dict[int, str] = {}
        self.round_time = None   # the aggregation's duration (set when it is recorded)
        self.messages = []   # (numel, bytes, direction) of every completed transfer, for the invariant check
        # bytes of protocol messages not sized as model messages (secure aggregation's key
        # agreement, shares and unmasking: sim/protocols/secagg.py), counted in bytes_up/down too
        self.protocol_bytes = 0
        self.recorded = np.zeros(self.n, dtype=bool)    # a row's outcome is written (once: `mark_recorded`)
        # bytes (up, down) of this log's rows that ended after its metrics row was written
        # (counted in the model's next row), and those of earlier logs its own row counted
        self.late_out = np.zeros(2, dtype=np.int64)
        self.late_in = np.zeros(2, dtype=np.int64)
        # seconds of each row's download, whole planned computation and upload (NaN: not
        # reached), kept when a selector observes them (protocols/selecting.py); not in clients.csv
        self.phases = np.full((3, self.n), np.nan) if phases else None
        self.timeline = None     # the run's Timeline when `run.timeline` is on (sim/timeline.py)

    def mark_recorded(self, rows: np.ndarray) -> None:
        """These rows' outcomes are written now: once (sim/protocols/outcome.py); a second
        write is a flemu bug."""
        if self.recorded[rows].any():
            i = int(np.flatnonzero(self.recorded[rows])[0])
            raise InvariantError(f"round {self.round}: client {int(self.clients()[rows[i]])}'s outcome recorded "
                                 "twice (a row is written once, when its facts are final): a flemu bug")
        self.recorded[rows] = True

    def at(self, client: int) -> int:
        """Row of `client` in this log's columns."""
        if self.ids is None:
            return client
        if self._pos is None:
            self._pos = {c: i for i, c in enumerate(self.ids.tolist())}
        return self._pos[int(client)]

    def positions(self, clients) -> np.ndarray:
        """Rows of these clients (vectorised `at`; a client without a row is a KeyError)."""
        clients = np.asarray(clients, dtype=np.int64)
        if self.ids is None:
            return clients
        if len(clients) == len(self.ids) and np.array_equal(clients, self.ids):
            return np.arange(len(clients))
        at = np.searchsorted(self._sorted, clients)
        bad = at >= len(self._sorted)
        bad[~bad] = self._sorted[at[~bad]] != clients[~bad]
        if bad.any():
            raise KeyError(int(clients[bad][0]))
        return self._order[at]

    def clients(self) -> np.ndarray:
        """Client id of each row."""
        return np.arange(self.n) if self.ids is None else self.ids

    def set_extra(self, name: str, client: int, value, dtype=np.float64, default=np.nan):
        if name not in self.extra:
            self.extra[name] = np.full(self.n, default, dtype=dtype)
        self.extra[name][self.at(client)] = value

    def record_sgd_steps(self, client: int, n: int) -> None:
        """clients.csv `sgd_steps`: the SGD steps of a client whose `steps` counts iterations
        of several (T-SFL epochs)."""
        self.set_extra("sgd_steps", client, n, dtype=np.int64, default=0)

    def sgd_steps_total(self) -> int:
        """SGD steps this log's clients performed in virtual time."""
        sgd = self.extra.get("sgd_steps")
        return int(self.steps.sum() if sgd is None else sgd.sum())

    def drop(self, client: int, reason: str):
        i = self.at(client)
        self.cols["dropped"][i] = True
        self.drop_reason[i] = reason

    def frame(self, participants_only: bool) -> pd.DataFrame:
        cols = dict(self.cols)
        reason = np.full(self.n, "", dtype=object)
        for i, r in self.drop_reason.items():
            reason[i] = r
        df = pd.DataFrame({"round": self.round, "client": self.clients(), **cols,
                           "drop_reason": reason, **self.extra})
        if participants_only:
            df = df[df["selected"]]
        return df


class Recorder:
    def __init__(self, num_clients: int, participants_only: bool = False, events: bool = False,
                 multi_model: bool = False, per_job: bool = False, timeline: bool = False):
        self.num_clients = num_clients
        self.participants_only = participants_only
        self.multi_model = multi_model
        self.per_job = per_job          # the protocol records one row per client job (JOB logs)
        self.metrics: list[dict] = []
        self.rounds: list[RoundLog] = []
        self.events: Optional[list] = [] if events else None
        self._late: dict = {}           # model -> (up, down) bytes its next metrics row counts (`late_bytes`)
        self.phases = False             # ROUND logs keep each row's phase seconds (RoundLog.phases)
        self.client_evals: list = []      # (model, columns) of each per-client evaluation (client_eval.csv)
        self.timeline = Timeline() if timeline else None    # timeline.csv (`run.timeline`)

    def round_log(self, round_: int, task: int = 0, ids=None, aggregation: bool = False) -> RoundLog:
        """A ROUND log, recorded now."""
        log = RoundLog(round_, self.num_clients, task, ids, aggregation, phases=self.phases)
        log.timeline = self.timeline
        self.rounds.append(log)
        return log

    def idle_log(self, round_: int, ids) -> RoundLog:
        """An IDLE log of round `round_` (multi-model clients that train no model), recorded now."""
        log = RoundLog(round_, self.num_clients, -1, ids, kind=IDLE)
        self.rounds.append(log)
        return log

    def job_log(self, client: int, job: int, task: int = 0) -> RoundLog:
        """A JOB log of one client job (its `job` key), not yet recorded: `commit` records it
        once its round is known."""
        log = RoundLog(0, self.num_clients, task, ids=[client], kind=JOB)
        log.set_extra("job", client, job, dtype=np.int64, default=0)
        log.timeline = self.timeline
        return log

    def commit(self, log: RoundLog, round_: int) -> None:
        """Record a JOB log under round `round_` (the merge it counts toward)."""
        log.round = round_
        self.rounds.append(log)

    def aggregations(self, task: Optional[int] = None) -> list:
        """The logs of aggregations (of model `task`), in order."""
        return [log for log in self.rounds if log.aggregation and (task is None or log.task == task)]

    def metric(self, row: dict) -> None:
        """Append a metrics row (final: nothing changes it afterwards)."""
        self.metrics.append(row)

    def late_bytes(self, log: RoundLog, up: int, down: int) -> None:
        """Bytes of `log`'s rows that ended after its metrics row was written (FedUMF's
        background downloads): the model's next metrics row counts them (`take_late`)."""
        if up or down:
            log.late_out += (up, down)
            u, d = self._late.get(log.task, (0, 0))
            self._late[log.task] = (u + up, d + down)

    def take_late(self, model: int) -> tuple:
        """(up, down) late bytes of `model` not yet counted in a metrics row; now counted."""
        return self._late.pop(model, (0, 0))

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

    def client_eval(self, columns: dict, task: int = 0) -> None:
        """One per-client evaluation's rows (`EVAL_COLUMNS`)."""
        self.client_evals.append((task, columns))

    def client_eval_frame(self) -> pd.DataFrame:
        """client_eval.csv: every per-client evaluation in order (multi-model runs: a `model`
        column after `round`)."""
        frames = []
        for task, cols in self.client_evals:
            f = pd.DataFrame(cols, columns=EVAL_COLUMNS)
            if self.multi_model:
                f.insert(2, "model", task)
            frames.append(f)
        if not frames:
            return pd.DataFrame(columns=[*EVAL_COLUMNS[:2], *(["model"] if self.multi_model else []), *EVAL_COLUMNS[2:]])
        return pd.concat(frames, ignore_index=True)

    def timeline_frame(self, clients, end: float) -> pd.DataFrame:
        """timeline.csv (`run.timeline`): every recorded piece of work, then the offline
        periods in [0, end] of clients with continuous-time availability, and the aggregated
        rounds clients of per-round availability were not available in (sim/timeline.py)."""
        offline = pd.concat([offline_periods(clients, end), round_offline(self.rounds, clients, self.metrics)])
        return self.timeline.frame(self.rounds, offline)

    def events_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.events or [], columns=["time", "client", "state", "round", "detail"])
