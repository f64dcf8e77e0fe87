"""Trace files: FedScale's published device traces converted to flemu's CSV formats.

FedScale (Lai et al., "FedScale: Benchmarking Model and System Performance of Federated
Learning at Scale", ICML 2022) ships two pickles:
- client_device_capacity: {client_id: {'computation': ms per sample of inference,
  'communication': kbit/s}}; FedScale takes a training step as 3 x inference
  (computation time = 3 x batch x steps x ms / 1000 s) and transfer time = kbits / kbit/s.
- client_behave_trace: {client_id: {'active': [t...], 'inactive': [t...], 'finish_time': T,
  'duration': ..., 'model': ...}}: online from active[k] to inactive[k], repeating with
  period finish_time (seconds).
They are read with a restricted unpickler that builds only dicts, lists, tuples, strings,
numbers, booleans and None: any other object in the file is refused, never constructed.

Output:
- compute trace CSV (flemu compute model `trace`): client, start, sample_time
  (seconds per sample of a training step = 3 x ms / 1000);
- link CSV: client, up_mbps, down_mbps (FedScale's one figure for both directions);
- availability trace CSV (flemu availability model `trace`): client, start, end, period.
"""
from __future__ import annotations

import csv
import io
import math
import pickle
import pickletools
from pathlib import Path

from . import limits

MAX_PICKLE_BYTES = 2 ** 31       # FedScale's largest trace is a few hundred MB
MAX_DEPTH = 16                   # FedScale's records are 3 deep (id -> record -> list)


class RestrictedUnpickler(pickle.Unpickler):
    """Refuses every global: only the built-in opcodes for dict, list, tuple, str, bytes,
    int, float, bool and None can build anything."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: FedScale traces hold only "
                                     "dicts, lists, strings and numbers")


def safe_load(path):
    """A FedScale pickle, read safely: at most MAX_PICKLE_BYTES; every opcode scanned first
    (pickletools, reading from memory), so a length field that claims more bytes than the file
    holds is refused before anything is allocated; then unpickled with no globals, and its
    nesting held to MAX_DEPTH. Any breach: one TraceError naming the file."""
    size = Path(path).stat().st_size
    if size > MAX_PICKLE_BYTES:
        raise limits.TraceError(f"{path}: {size} bytes; a FedScale trace pickle is at most {MAX_PICKLE_BYTES}")
    with open(path, "rb") as f:
        data = f.read()
    try:
        for _ in pickletools.genops(io.BytesIO(data)):
            pass
        obj = RestrictedUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, ValueError, EOFError, MemoryError, KeyError, IndexError,
            TypeError, AttributeError, OverflowError) as e:
        raise limits.TraceError(f"{path}: not a FedScale trace pickle ({type(e).__name__}: {e})") from None
    _check_plain(obj, str(path))
    return obj


def _check_plain(x, where="trace"):
    """Only plain data, nested at most MAX_DEPTH deep (an explicit stack: no recursion)."""
    stack = [(x, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise limits.TraceError(f"{where}: nested more than {MAX_DEPTH} deep; a FedScale trace is a "
                                    "dict of per-client records")
        if isinstance(v, dict):
            stack.extend((y, depth + 1) for kv in v.items() for y in kv)
        elif isinstance(v, (list, tuple)):
            stack.extend((y, depth + 1) for y in v)
        elif not isinstance(v, (str, bytes, int, float, bool, type(None))):
            raise limits.TraceError(f"{where}: unexpected {type(v).__name__}")


def _field(rec, key, cid, where):
    if not isinstance(rec, dict) or key not in rec:
        raise limits.TraceError(f"{where}: client {cid!r} has no {key!r}")
    return rec[key]


def _finite(v, what, cid, where) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x):
        raise limits.TraceError(f"{where}: client {cid!r} has {what} {v!r}; a finite number is needed")
    return x


def capacity_rows(data: dict, where="device capacity") -> list:
    """(client, sample_time s, mbps) of every client with positive capacities, checked
    before anything is written."""
    if not isinstance(data, dict):
        raise limits.TraceError(f"{where}: a dict of client -> record expected, got {type(data).__name__}")
    out = []
    for cid in sorted(data, key=lambda k: (str(type(k)), k)):
        rec = data[cid]
        ms = _finite(_field(rec, "computation", cid, where), "computation", cid, where)
        kbps = _finite(_field(rec, "communication", cid, where), "communication", cid, where)
        if ms > 0 and kbps > 0:
            out.append((cid, 3.0 * ms / 1000.0, kbps / 1000.0))
    return out


def convert_capacity(data: dict, out_compute, out_links) -> int:
    rows = capacity_rows(data)
    with open(out_compute, "w", newline="") as fc, open(out_links, "w", newline="") as fl:
        wc, wl = csv.writer(fc), csv.writer(fl)
        wc.writerow(["client", "start", "sample_time"])
        wl.writerow(["client", "up_mbps", "down_mbps"])
        for cid, sample_time, mbps in rows:
            wc.writerow([cid, 0, sample_time])
            wl.writerow([cid, mbps, mbps])
    return len(rows)


def behaviour_rows(data: dict, where="behaviour trace") -> tuple:
    """((client, start, end, period) of every non-empty interval, clients), checked first. An
    interval is cut at its client's finish_time (FedScale asks a time modulo finish_time, so
    what lies past it is never online), as a trace that repeats needs (trace_files.py)."""
    if not isinstance(data, dict):
        raise limits.TraceError(f"{where}: a dict of client -> record expected, got {type(data).__name__}")
    out = []
    for cid in sorted(data, key=lambda k: (str(type(k)), k)):
        rec = data[cid]
        act, inact = _field(rec, "active", cid, where), _field(rec, "inactive", cid, where)
        if not isinstance(act, (list, tuple)) or not isinstance(inact, (list, tuple)):
            raise limits.TraceError(f"{where}: client {cid!r}: active and inactive are lists of times")
        period = rec.get("finish_time")
        period = None if period is None else _finite(period, "finish_time", cid, where)
        for s, e in zip(act, inact):
            s, e = _finite(s, "an active time", cid, where), _finite(e, "an inactive time", cid, where)
            if period is not None:      # FedScale reads a time modulo finish_time: nothing past it
                e = min(e, period)
            if e > s:
                out.append((cid, s, e, "" if period is None else period))
    return out, len(data)


def convert_behaviour(data: dict, out_avail) -> int:
    rows, n = behaviour_rows(data)
    with open(out_avail, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["client", "start", "end", "period"])
        w.writerows(rows)
    return n


def import_fedscale(capacity=None, behaviour=None, out_dir=".") -> dict:
    """Convert FedScale pickles; returns the paths written. Both files are read and checked
    before anything is written."""
    cap = safe_load(capacity) if capacity is not None else None
    beh = safe_load(behaviour) if behaviour is not None else None
    if cap is not None:
        capacity_rows(cap, str(capacity))
    if beh is not None:
        behaviour_rows(beh, str(behaviour))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    if cap is not None:
        c, l = out / "compute_trace.csv", out / "links.csv"
        written["clients_capacity"] = convert_capacity(cap, c, l)
        written["compute_trace"], written["links"] = str(c), str(l)
    if beh is not None:
        a = out / "availability_trace.csv"
        written["clients_behaviour"] = convert_behaviour(beh, a)
        written["availability_trace"] = str(a)
    return written


from .trace_files import read_links  # noqa: E402,F401  (re-exported)
