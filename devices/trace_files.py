"""Trace files: the CSV formats flemu replays, read row by row within devices/limits.py's
ranges. Every refusal is a `limits.TraceError` naming the file and the row (and line).

- step trace (compute model `trace`): client, start, and step_time | sample_time | speed;
- links (network model `link_trace`): client, up_mbps, down_mbps;
- online intervals (availability model `trace`): client, start, end [, period];
- rounds (availability model `round_trace`): round, client, available.
"""
from __future__ import annotations

import csv

from . import limits


def read_step_trace(path) -> dict:
    """CSV with columns client, start and step_time (seconds per step) or sample_time
    (seconds per sample of a training step) or speed (steps per second): the value holds
    from `start` until the client's next row. Returns {trace client: (starts, kind, values)}."""
    rows: dict = {}
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        kinds = ("step_time", "sample_time", "speed")
        limits.require_columns(path, r.fieldnames, ("client", "start"), kinds)
        kind = next(k for k in kinds if k in r.fieldnames)
        for n, line in limits.rows(path, r):
            start = limits.number(path, n, "start", line["start"])
            rows.setdefault(line["client"], []).append((start, limits.number(path, n, kind, line[kind])))
    out = {}
    for c, lst in rows.items():
        lst.sort()
        out[c] = ([s for s, _ in lst], kind, [v for _, v in lst])
    return out



def read_links(path) -> dict:
    """client -> (up_mbps, down_mbps) from a links CSV (bandwidths within limits.MBPS)."""
    out = {}
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        limits.require_columns(path, r.fieldnames, ("client", "up_mbps", "down_mbps"))
        for n, line in limits.rows(path, r):
            out[line["client"]] = (limits.number(path, n, "up_mbps", line["up_mbps"]),
                                   limits.number(path, n, "down_mbps", line["down_mbps"]))
    return out



def read_interval_trace(path) -> dict:
    """CSV with columns client, start, end (online intervals, seconds) and optionally period
    (the trace repeats with that period, FedScale's finish_time). -> {client: (starts, ends, period)}."""
    rows: dict = {}
    periods: dict = {}
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        limits.require_columns(path, r.fieldnames, ("client", "start", "end"))
        has_period = "period" in r.fieldnames
        for n, line in limits.rows(path, r):
            s, e = limits.number(path, n, "start", line["start"]), limits.number(path, n, "end", line["end"])
            if e < s:
                raise limits.TraceError(f"{path} {limits.where(n)}: the interval ends before it starts ({s:g} > {e:g})")
            rows.setdefault(line["client"], []).append((s, e, n))
            if has_period and line.get("period") not in (None, ""):
                periods[line["client"]] = limits.number(path, n, "period", line["period"])
    if not any(e > s for iv in rows.values() for s, e, _ in iv):
        raise limits.TraceError(f"{path}: no client is ever online (every interval is empty)")
    for c, iv in rows.items():        # a repeating trace's intervals lie within one period
        late = next(((s, e, n) for s, e, n in iv if c in periods and e > periods[c]), None)   # rows in file order
        if late:
            s, e, n = late
            raise limits.TraceError(f"{path} {limits.where(n)}: client {c}'s interval [{s:g}, {e:g}) ends after its "
                                    f"period {periods[c]:g}; the intervals of a trace that repeats lie within "
                                    "[0, period] (split one that crosses it at the period)")
    out = {}
    for c, iv in rows.items():
        iv.sort()
        merged = []
        for s, e, _ in iv:
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        out[c] = ([s for s, _ in merged], [e for _, e in merged], periods.get(c))
    return out



def read_round_trace(path) -> tuple:
    """CSV with columns round, client, available (a run's clients.csv works) -> ({trace client:
    set of rounds online}, last round)."""
    table, last = {}, 0
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        limits.require_columns(path, r.fieldnames, ("round", "client", "available"))
        for n, line in limits.rows(path, r):
            try:
                rd = int(line["round"])
            except ValueError:
                rd = 0
            if not 1 <= rd <= 10**9:
                raise limits.TraceError(f"{path} {limits.where(n)}: round {line['round']!r} is not a round number "
                                        "(an integer from 1)")
            last = max(last, rd)
            table.setdefault(line["client"], set())
            if str(line["available"]).strip().lower() in ("1", "true", "yes"):
                table[line["client"]].add(rd)
    if not any(table.values()):
        raise limits.TraceError(f"{path}: no client is ever available (no row with available 1, true or yes)")
    return table, last
