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
import pickle
from pathlib import Path


class RestrictedUnpickler(pickle.Unpickler):
    """Refuses every global: only the built-in opcodes for dict, list, tuple, str, bytes,
    int, float, bool and None can build anything."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: FedScale traces hold only "
                                     "dicts, lists, strings and numbers")


def safe_load(path):
    with open(path, "rb") as f:
        return RestrictedUnpickler(f).load()


def _check_plain(x, where="trace"):
    if isinstance(x, dict):
        for k, v in x.items():
            _check_plain(k, where)
            _check_plain(v, where)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _check_plain(v, where)
    elif not isinstance(x, (str, bytes, int, float, bool, type(None))):
        raise ValueError(f"{where}: unexpected {type(x).__name__}")


def convert_capacity(data: dict, out_compute, out_links) -> int:
    _check_plain(data, "device capacity")
    n = 0
    with open(out_compute, "w", newline="") as fc, open(out_links, "w", newline="") as fl:
        wc, wl = csv.writer(fc), csv.writer(fl)
        wc.writerow(["client", "start", "sample_time"])
        wl.writerow(["client", "up_mbps", "down_mbps"])
        for cid in sorted(data, key=lambda k: (str(type(k)), k)):
            rec = data[cid]
            ms, kbps = float(rec["computation"]), float(rec["communication"])
            if ms <= 0 or kbps <= 0:
                continue
            wc.writerow([cid, 0, 3.0 * ms / 1000.0])
            wl.writerow([cid, kbps / 1000.0, kbps / 1000.0])
            n += 1
    return n


def convert_behaviour(data: dict, out_avail) -> int:
    _check_plain(data, "behaviour trace")
    n = 0
    with open(out_avail, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["client", "start", "end", "period"])
        for cid in sorted(data, key=lambda k: (str(type(k)), k)):
            rec = data[cid]
            act, inact = list(rec["active"]), list(rec["inactive"])
            period = rec.get("finish_time")
            for s, e in zip(act, inact):
                if e > s:
                    w.writerow([cid, float(s), float(e), "" if period is None else float(period)])
            n += 1
    return n


def import_fedscale(capacity=None, behaviour=None, out_dir=".") -> dict:
    """Convert FedScale pickles; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    if capacity is not None:
        c, l = out / "compute_trace.csv", out / "links.csv"
        written["clients_capacity"] = convert_capacity(safe_load(capacity), c, l)
        written["compute_trace"], written["links"] = str(c), str(l)
    if behaviour is not None:
        a = out / "availability_trace.csv"
        written["clients_behaviour"] = convert_behaviour(safe_load(behaviour), a)
        written["availability_trace"] = str(a)
    return written


def read_links(path) -> dict:
    """client -> (up_mbps, down_mbps) from a links CSV."""
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            out[r["client"]] = (float(r["up_mbps"]), float(r["down_mbps"]))
    return out
