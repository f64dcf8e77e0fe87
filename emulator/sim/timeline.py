"""The run's timeline (timeline.csv; docs/concepts.md, "The timeline"): when each piece of
each client's work began and ended in virtual time, and the offline periods of clients whose
availability is continuous in time. Recorded only when asked (`run.timeline: true`): off,
no round log holds a `Timeline` and nothing here runs.

One row per piece: `client`, `round` (the aggregation it belongs to: under `async`, the merge
its job was committed to), `model`, `phase` (download, compute, upload, offline), `start`,
`end` (virtual seconds), `bytes` (what clients.csv counts for it: a download that carries its
broadcast's bytes, an upload that arrived; 0 otherwise) and `cut` (empty when the piece ended;
else why it stopped part-way: "late", "offline", ...). The pieces are those clients.csv
counts, from the same outcomes (`outcome.record_outcomes`, written once per row when its
facts are final): per client and round, the download, compute and upload seconds add up to
clients.csv `comm_time + compute_time`. Offline rows have model -1: a continuous-time
model's periods (round 0), and, for a per-round model, each aggregated round the client was
not available in, from the round's start to its aggregation (its round).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

COLUMNS = ("client", "round", "model", "phase", "start", "end", "bytes", "cut")
PHASES = ("download", "compute", "upload", "offline")
#: most on/off periods read per client (a trace or a model switching faster than this is cut short)
MAX_PERIODS = 100_000


class Timeline:
    """The pieces recorded so far, per round log (its round is read when written: a job's
    round is known only when it is committed)."""

    def __init__(self):
        self.parts: list = []     # (log, columns dict)

    def add(self, log, o, done: tuple, carried, messages) -> None:
        """Record outcomes `o` of `log` (outcome.Outcomes) as pieces. `done`: (download
        ended, upload started, upload arrived) by `o.at`, as `record_outcomes` computed them;
        `carried`: downloads that count the broadcast's bytes; `messages` as there."""
        (_, bytes_down), (_, bytes_up) = messages
        down_done, up_started, arrived = done
        n = len(o.ids)
        t0 = np.broadcast_to(np.asarray(o.t0, dtype=np.float64), (n,))
        at, stopped = o.at, o.stopped
        reason = np.broadcast_to(np.asarray(o.reason, dtype=object), (n,))
        zeros = np.zeros(n, dtype=np.int64)
        pieces = (   # phase, recorded?, start, end, ended?, bytes
            ("download", down_done | stopped, t0, np.where(down_done, o.down, at), down_done,
             np.where(carried, bytes_down, 0)),
            ("compute", up_started | (down_done & stopped), o.down, np.where(up_started, o.compute, at),
             up_started, zeros),
            ("upload", arrived | (up_started & stopped), o.compute, np.where(arrived, o.up, at), arrived,
             np.where(arrived, bytes_up, 0)),
        )
        for phase, keep, start, end, ended, nbytes in pieces:
            with np.errstate(invalid="ignore"):
                keep = keep & (end > start)
            if keep.any():
                self.parts.append((log, {"client": o.ids[keep], "phase": phase, "start": start[keep],
                                         "end": end[keep], "bytes": nbytes[keep],
                                         "cut": np.where(ended[keep], "", reason[keep])}))

    def frame(self, recorded_logs, offline: pd.DataFrame) -> pd.DataFrame:
        """timeline.csv: the pieces of the logs the run recorded (a job never committed is
        in no round), then the `offline` periods; sorted by client, start, phase order."""
        recorded = {id(log) for log in recorded_logs}
        frames = [pd.DataFrame({"client": cols["client"], "round": log.round, "model": log.task,
                                "phase": cols["phase"], "start": cols["start"], "end": cols["end"],
                                "bytes": cols["bytes"], "cut": cols["cut"]})
                  for log, cols in self.parts if id(log) in recorded]
        frames.append(offline)
        df = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
            else pd.DataFrame(columns=list(COLUMNS))
        df["order"] = df["phase"].map({p: i for i, p in enumerate(PHASES)})
        return df.sort_values(["client", "start", "order"], kind="stable").drop(columns="order")[list(COLUMNS)]


def _offline_frame(rows: list) -> pd.DataFrame:
    ids, rnd, start, stop = zip(*rows) if rows else ((), (), (), ())
    return pd.DataFrame({"client": np.asarray(ids, dtype=np.int64), "round": np.asarray(rnd, dtype=np.int64),
                         "model": -1, "phase": "offline", "start": np.asarray(start, dtype=np.float64),
                         "end": np.asarray(stop, dtype=np.float64), "bytes": 0, "cut": ""})


def round_offline(logs, clients, metrics: list) -> pd.DataFrame:
    """Per-round availability: each aggregated round (of model 0) a client of a per-round
    model was not available in, from the round's start (its aggregation's time less its
    `round_time`) to its aggregation."""
    # per group, not per client: a Client object is made only for clients the run touched (sim/fleet.py)
    per_round = np.array([g[3].kind == "round" for g in clients.groups], dtype=bool)[clients.group_of]
    when = {int(m["round"]): (float(m["virtual_time"]) - float(m.get("round_time") or 0.0), float(m["virtual_time"]))
            for m in metrics if m.get("model", 0) == 0}
    rows: list = []
    for log in logs:
        span = when.get(log.round)
        if not (log.aggregation and log.kind == "round" and log.task == 0) or span is None:
            continue
        ids = log.clients()
        off = ids[~log.available & per_round[ids]]
        rows.extend((int(c), log.round, *span) for c in off)
    return _offline_frame(rows)


def offline_periods(clients, end: float) -> pd.DataFrame:
    """Offline periods in [0, end] of every client whose availability is continuous in time
    (its group's model's `kind` is "time"; no Client object is made), asked of the model after the run (its periods are
    generated forward from the client's own stream, so asking again gives the run's)."""
    rows: list = []
    for gi, (_, _, _, av) in enumerate(clients.groups):       # the group's availability model
        if av.kind != "time":
            continue
        for cid in clients.members(gi).tolist():
            t = 0.0
            for _ in range(MAX_PERIODS):
                on = float(av.next_online(cid, t))
                if on > t:
                    rows.append((cid, 0, t, min(on, end)))
                if on >= end or math.isinf(on):
                    break
                t = float(av.online_until(cid, on))
                if t >= end or t <= on:
                    break
    return _offline_frame(rows)
