"""A run's timeline in the Chrome Trace Event format (`flemu trace RUN -o run.json`), the
JSON object form that Perfetto (ui.perfetto.dev) and chrome://tracing open.

One process per device group (pid 1, 2, ... in drawing order), one thread per client
(tid = the client's id), named by metadata events (ph "M": process_name, thread_name,
process_sort_index, thread_sort_index). Every piece of timeline.csv is a complete event
(ph "X"): `name` its phase (download, compute, upload, offline), `cat` its kind (the phase, or
"late" for a piece cut part-way), `ts` and `dur` in microseconds of virtual time, `args`
its round, model, bytes, why it was cut and its exact `start_s` / `end_s` in seconds. The
server (pid 0) shows each round as a complete event from its start to its aggregation,
with instant events (ph "i") at each deadline. Idle time is the gaps between events.
"""
from __future__ import annotations

import json
from pathlib import Path

from emulator.runs import outputs

from .timeline import RunTimeline

US = 1e6          # microseconds per virtual second
WRITER = {"writer": "flemu"}


def _meta(name: str, pid: int, tid: int, value) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name" if "name" in name else "sort_index": value}}


def _metadata(tl: RunTimeline, pids: dict) -> list:
    ev = [_meta("process_name", 0, 0, "server"), _meta("process_sort_index", 0, 0, 0)]
    for g, pid in pids.items():
        ev += [_meta("process_name", pid, 0, f"group {g}"), _meta("process_sort_index", pid, 0, pid)]
    for i, c in enumerate(tl.clients):
        pid = pids[tl.groups[c]]
        ev += [_meta("thread_name", pid, int(c), f"client {c}"), _meta("thread_sort_index", pid, int(c), i)]
    return ev


def _pieces(tl: RunTimeline, pids: dict) -> list:
    s = tl.spans[tl.spans["kind"] != "idle"]
    return [{"name": p, "cat": k, "ph": "X", "ts": a * US, "dur": (b - a) * US, "pid": pids[tl.groups[int(c)]],
             "tid": int(c), "args": {"round": int(r), "model": int(m), "bytes": int(nb), "cut": cut,
                                     "start_s": float(a), "end_s": float(b)}}
            for c, p, k, a, b, r, m, nb, cut in zip(s["client"], s["phase"], s["kind"], s["start"], s["end"],
                                                    s["round"], s["model"], s["bytes"], s["cut"])]


def _server(tl: RunTimeline) -> list:
    ev = []
    for _, r in tl.rounds.iterrows():
        ev.append({"name": f"round {int(r['round'])}", "cat": "round", "ph": "X", "ts": float(r["start"]) * US,
                   "dur": float(r["end"] - r["start"]) * US, "pid": 0, "tid": 0,
                   "args": {"round": int(r["round"]), "start_s": float(r["start"]), "aggregation_s": float(r["end"])}})
        if r["deadline"] == r["deadline"]:      # not NaN
            ev.append({"name": "deadline", "cat": "deadline", "ph": "i", "s": "p", "ts": float(r["deadline"]) * US,
                       "pid": 0, "tid": 0, "args": {"round": int(r["round"])}})
    return ev


def trace(tl: RunTimeline) -> dict:
    """The trace as a JSON object (`otherData` first: flemu's signature)."""
    pids = {}
    for c in tl.clients:
        pids.setdefault(tl.groups[c], len(pids) + 1)
    return {"otherData": {**WRITER, "run": tl.name, "time_unit": "virtual microseconds"},
            "displayTimeUnit": "ms",
            "traceEvents": _metadata(tl, pids) + _server(tl) + _pieces(tl, pids)}


def write(tl: RunTimeline, out) -> Path:
    """Write the trace to `out` (replacing only a trace flemu wrote)."""
    out = outputs.check_file_target(Path(out), "trace file")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(trace(tl)))
    return out
