"""A run's timeline over virtual time (`flemu timeline`, `flemu trace`; docs/concepts.md,
"The timeline"), read from its run directory only: timeline.csv (written when the scenario
sets `run.timeline: true`), metrics.csv (each aggregation's time and round_time),
partition.csv (each client's device group) and config.yaml (the round's deadline).

`load(run_dir, rounds, clients)` gives a `RunTimeline`: one span per piece of work, of a
kind: `download`, `compute`, `upload`, `late` (a piece cut part-way: the deadline closed the
round, the client went offline, ...; its `cut` says why), `offline`, and `idle` (online and
not working: the gaps); each round's start, deadline and aggregation; the clients, grouped
by device group. A window of rounds (`rounds=(3, 8)`: from round 3's start to round 8's
aggregation) and a cap on clients (`clients=N`, taken in turn from each group) keep a large
fleet readable; `flemu timeline` draws at most DEFAULT_CLIENTS unless told otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import yaml

KINDS = ("download", "compute", "upload", "late", "offline", "idle")
COLORS = {"download": "#4c78a8", "compute": "#54a24b", "upload": "#f58518", "late": "#e45756",
          "offline": "#9d9d9d", "idle": "#f2f2f2"}
LEGEND = {"download": "download", "compute": "compute", "upload": "upload",
          "late": "late / cut (work lost)", "offline": "offline", "idle": "idle (online)"}
DEFAULT_CLIENTS = 200     # `flemu timeline`'s cap: a fleet of thousands would draw one pixel a client
ROUNDS_RULE = "give FIRST:LAST (e.g. 3:8), or one round N; rounds are whole numbers >= 1 and FIRST <= LAST"


def parse_rounds(text: Optional[str]) -> Optional[tuple]:
    """`--rounds`: "3:8" -> (3, 8); "5" -> (5, 5); ":8" / "3:" leave an end open (None);
    None -> None. A ValueError names what is allowed."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d*)\s*(?::\s*(\d*)\s*)?", text)
    if m is None or (m.group(1) == "" and not m.group(2)):
        raise ValueError(f"--rounds {text!r}: {ROUNDS_RULE}")
    first = int(m.group(1)) if m.group(1) else None
    last = first if m.group(2) is None and ":" not in text else (int(m.group(2)) if m.group(2) else None)
    if (first is not None and first < 1) or (last is not None and last < 1) or \
            (first is not None and last is not None and first > last):
        raise ValueError(f"--rounds {text!r}: {ROUNDS_RULE}")
    return first, last


@dataclass
class RunTimeline:
    """What `load` read: `spans` (client, group, round, model, phase, kind, start, end,
    bytes, cut), `rounds` (round, start, deadline, end: its aggregation), `clients` (ids in
    drawing order: by group, then id), `groups` (each client's group, every client of the
    run), the window [t0, t1]; `left_out`: the run's clients not drawn (the cap)."""

    name: str
    spans: pd.DataFrame
    rounds: pd.DataFrame
    clients: list
    groups: dict
    t0: float
    t1: float

    @property
    def left_out(self) -> int:
        return len(self.groups) - len(self.clients)


def read_pieces(run_dir) -> pd.DataFrame:
    """timeline.csv as written (a ValueError says how to get one when it is absent)."""
    p = Path(run_dir) / "timeline.csv"
    if not p.exists():
        raise ValueError(f"{run_dir}: no timeline.csv; run the scenario with `run.timeline: true` "
                         f"(e.g. flemu run FILE --set run.timeline=true)")
    return pd.read_csv(p, keep_default_na=False, dtype={"cut": str})


def deadline_seconds(run_dir) -> Optional[float]:
    """The round's deadline from config.yaml: `protocol.wait` {mode: deadline, seconds}, or
    `protocol.interval` (intervals close on the clock); None when rounds have none."""
    cfg = yaml.safe_load((Path(run_dir) / "config.yaml").read_text()) or {}
    proto = cfg.get("protocol") or {}
    wait = proto.get("wait")
    if isinstance(wait, dict) and wait.get("mode") == "deadline":
        return float(wait["seconds"])
    if proto.get("name") == "intervals" and proto.get("interval") is not None:
        return float(proto["interval"])
    return None


def round_frame(run_dir) -> pd.DataFrame:
    """Each aggregation of model 0: its round, start (its time less round_time), deadline
    (NaN: none, or the round closed before it) and end (its time)."""
    m = pd.read_csv(Path(run_dir) / "metrics.csv")
    m = m[(m["round"] >= 1) & (m.get("model", 0) == 0)]
    end = m["virtual_time"].to_numpy(dtype=float)
    rt = m["round_time"].to_numpy(dtype=float) if "round_time" in m else np.zeros(len(m))
    start = end - np.nan_to_num(rt)
    d = deadline_seconds(run_dir)
    deadline = start + d if d is not None else np.full(len(m), np.nan)
    deadline = np.where(deadline <= end + 1e-9, deadline, np.nan)   # a round that closed earlier met none
    return pd.DataFrame({"round": m["round"].to_numpy(dtype=np.int64), "start": start, "deadline": deadline,
                         "end": end})


def window(rounds: pd.DataFrame, pieces: pd.DataFrame, want: Optional[tuple]) -> tuple:
    """[t0, t1] of the rounds `want` (None: the whole run); a ValueError when none is in the run."""
    t_end = float(max(pieces["end"].max() if len(pieces) else 0.0, rounds["end"].max() if len(rounds) else 0.0))
    if want is None:
        return 0.0, t_end
    first, last = want
    sel = rounds[(rounds["round"] >= (first or 1)) & (rounds["round"] <= (last or np.iinfo(np.int64).max))]
    if not len(sel):
        have = f"1:{int(rounds['round'].max())}" if len(rounds) else "none"
        raise ValueError(f"--rounds {first or ''}:{last or ''}: no such round in this run (its rounds: {have})")
    return float(sel["start"].min()), float(sel["end"].max()) if last is not None else t_end


def pick_clients(groups: dict, cap: Optional[int]) -> list:
    """Client ids by group (groups in order of first appearance), then id; at most `cap`,
    taken in turn from each group so that every group is shown."""
    order: dict = {}
    for c in sorted(groups):
        order.setdefault(groups[c], []).append(c)
    if cap is not None:
        if cap < 1:
            raise ValueError(f"--clients {cap}: give a number of clients >= 1")
        lists, chosen = list(order.values()), set()
        i = 0
        while len(chosen) < min(cap, len(groups)):
            for ids in lists:
                if i < len(ids) and len(chosen) < cap:
                    chosen.add(ids[i])
            i += 1
        order = {g: [c for c in ids if c in chosen] for g, ids in order.items()}
    return [c for ids in order.values() for c in ids]


def idle_spans(work: pd.DataFrame, clients: list, t0: float, t1: float) -> pd.DataFrame:
    """The gaps in [t0, t1] of each client's spans (work and offline): online and idle."""
    rows = []
    by = {c: g for c, g in work.groupby("client")}
    for c in clients:
        t = t0
        g = by.get(c)
        spans = [] if g is None else sorted(zip(g["start"], g["end"]))
        for s, e in spans:
            if s > t:
                rows.append((c, t, min(s, t1)))
            t = max(t, e)
        if t < t1:
            rows.append((c, t, t1))
    c, s, e = zip(*rows) if rows else ((), (), ())
    return pd.DataFrame({"client": list(c), "round": 0, "model": -1, "phase": "idle", "kind": "idle",
                         "start": list(s), "end": list(e), "bytes": 0, "cut": ""})


def load(run_dir, rounds: Optional[tuple] = None, clients: Optional[int] = None) -> RunTimeline:
    """The run's timeline in a window of `rounds` ((first, last), either None: open), for at
    most `clients` clients."""
    run_dir = Path(run_dir)
    pieces = read_pieces(run_dir)
    part = pd.read_csv(run_dir / "partition.csv", usecols=["client", "group"])
    groups = dict(zip(part["client"].astype(int), part["group"].astype(str)))
    rf = round_frame(run_dir)
    t0, t1 = window(rf, pieces, rounds)
    ids = pick_clients(groups, clients)
    p = pieces[pieces["client"].isin(ids) & (pieces["end"] > t0) & (pieces["start"] < t1)].copy()
    p["start"], p["end"] = p["start"].clip(lower=t0), p["end"].clip(upper=t1)
    p["kind"] = np.where(p["cut"] != "", "late", p["phase"])
    spans = pd.concat([p, idle_spans(p, ids, t0, t1)], ignore_index=True)
    spans = spans[spans["end"] > spans["start"]]
    spans["group"] = spans["client"].map(groups)
    rf = rf[(rf["end"] >= t0) & (rf["start"] <= t1)].reset_index(drop=True)
    return RunTimeline(run_dir.name, spans.reset_index(drop=True), rf, ids, groups, t0, t1)
