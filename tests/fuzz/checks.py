"""What must hold in a run directory, read back from its files.

These checks repeat, from the written CSV / JSON / NumPy files and the resolved config.yaml only,
what `emulator/runs/invariants.py` checks on the recorder in memory, and add what only the files can
show (a column written wrong, a summary figure that disagrees with the CSVs it summarises).
Each returns a list of problems (empty: all good), so that a failing example names every one.

The issue's three historical bugs are each caught here: a model of a multi-model run never
trained (`models`), async writing one row per client per merge (`rows`), delay metrics counting
work no aggregation used (`delays`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

DONE = ("complete", "empty", "diverged", "stalled")   # empty: ran, but no aggregation weighed anyone
EPS = 1e-9


class RunDir:
    """A run directory's files, loaded once."""

    def __init__(self, path):
        self.path = Path(path)
        self.summary = json.loads((self.path / "summary.json").read_text())
        self.config = yaml.safe_load((self.path / "config.yaml").read_text())
        self.metrics = pd.read_csv(self.path / "metrics.csv")
        self.clients = pd.read_csv(self.path / "clients.csv", keep_default_na=False, na_values=[""])
        self.partition = pd.read_csv(self.path / "partition.csv")
        ev = self.path / "events.csv"
        self.events = pd.read_csv(ev, keep_default_na=False, na_values=[""]) if ev.exists() else None
        self.M = len(self.config["workloads"]) if "workloads" in self.config else 1
        # multi-model runs (even with one workload) skip a model in a round nobody trains it:
        # no metrics row, while the round counts in summary rounds
        self.multi = self.config.get("protocol", {}).get("name") == "multi_model"
        self.N = int(self.config["clients"]["count"])
        self.protocol = self.config["protocol"]["name"]
        self.all_rows = self.config.get("output", {}).get("clients_csv", "all") == "all"
        if "model" not in self.clients:
            self.clients["model"] = 0
        if "model" not in self.metrics:
            self.metrics["model"] = 0

    def model_files(self) -> list:
        return [self.path / ("model.npy" if self.M == 1 else f"model_{m}.npy") for m in range(self.M)]

    @property
    def ended_early(self) -> bool:
        """The run stopped on its virtual-time budget or stalled: its last round may be cut short."""
        vt = self.config["run"].get("virtual_time")
        return self.summary["status"] == "stalled" or (vt is not None and self.summary["virtual_time"] >= vt - EPS)


def check_all(path) -> list:
    rd = RunDir(path)
    out = []
    for f in (status, files, metrics_order, rows, aggregations, weights, delays, bytes_, times, summary_figures,
              events):
        try:
            out += [f"{f.__name__.rstrip('_')}: {p}" for p in f(rd)]
        except Exception as e:          # noqa: BLE001 - a check that cannot even read the files is a finding
            out.append(f"{f.__name__}: could not check ({type(e).__name__}: {e})")
    return out


# ---------------------------------------------------------------------------- the checks
def status(rd: RunDir) -> list:
    s = rd.summary
    bad = []
    if s.get("status") not in DONE:
        bad.append(f"status {s.get('status')!r} is none of {DONE}")
    if s.get("status") in ("diverged", "stalled") and not s.get("message"):
        bad.append(f"status {s['status']} without a message")
    if not s.get("invariants_checked"):
        bad.append("summary.json lists no invariant checks")
    return bad


def files(rd: RunDir) -> list:
    bad = []
    from emulator.scenario import schema as scenario
    try:
        scenario.load(rd.path / "config.yaml")
    except Exception as e:           # noqa: BLE001
        bad.append(f"config.yaml does not validate again: {e}")
    for m, f in enumerate(rd.model_files()):
        if not f.exists():
            bad.append(f"{f.name} missing")
            continue
        w = np.load(f)
        if w.ndim != 1 or not np.isfinite(w).all():
            bad.append(f"{f.name}: not a finite flat vector")
        params = rd.summary["models"][m]["params"]
        if w.size != params:
            bad.append(f"{f.name}: {w.size} parameters, summary says {params}")
    if sorted(rd.partition["client"]) != list(range(rd.N)):
        bad.append("partition.csv does not have one row per client")
    leftovers = [p.name for p in rd.path.parent.iterdir() if p.name.startswith(f".{rd.path.name}.")]
    if leftovers:
        bad.append(f"temporary leftovers beside the run directory: {leftovers}")
    return bad


def metrics_order(rd: RunDir) -> list:
    bad = []
    m = rd.metrics
    vt = m["virtual_time"].to_numpy()
    if not np.isfinite(vt).all():
        bad.append("non-finite virtual_time in metrics.csv")
    if (np.diff(vt) < -EPS).any():
        bad.append("virtual_time goes back between metrics rows")
    budget = rd.config["run"].get("virtual_time")
    if budget is not None and vt.max() > budget * (1 + EPS) + EPS:
        bad.append(f"an aggregation at virtual time {vt.max()} after the budget {budget}")
    for k in range(rd.M):
        r = m.loc[m["model"] == k, "round"].to_numpy()
        if not len(r) or r[0] != 0:
            bad.append(f"model {k}: no round-0 row (the initial model)")
        if (np.diff(r) <= 0).any():
            bad.append(f"model {k}: rounds not strictly increasing in metrics.csv")
    return bad


def rows(rd: RunDir) -> list:
    """One clients.csv row per (round, client) and model; async: one per client job."""
    c, bad = rd.clients, []
    if rd.protocol == "async":
        if "job" not in c:
            return ["async clients.csv has no `job` column"] if len(c) else []
        if c.duplicated(["client", "job"]).any():
            bad.append("a client job has two rows")
        merged = c[~c["dropped"].astype(bool)]
        if merged.duplicated(["round", "client"]).any():
            bad.append("a client is merged twice in one round")
        per_round = merged.groupby("round").size()
        rounds = rd.metrics.loc[rd.metrics["round"] >= 1, "round"]
        if sorted(per_round.index) != sorted(rounds) or (per_round != 1).any():
            bad.append(f"async: not exactly one merged job per merge (rows per round {per_round.to_dict()})")
        return bad
    keys = ["round", "client"] if rd.M > 1 else ["round", "model", "client"]
    if c.duplicated(keys).any():
        d = c[c.duplicated(keys, keep=False)].head(4)
        bad.append(f"duplicate rows for {keys}: {d[keys].values.tolist()}")
    if rd.all_rows and len(c):
        n = c.groupby("round").size()
        if (n != rd.N).any():
            bad.append(f"rounds without one row per client: {n[n != rd.N].to_dict()}")
    if (c["client"] < 0).any() or (c["client"] >= rd.N).any():
        bad.append("a client id outside 0..N-1")
    return bad


def aggregations(rd: RunDir) -> list:
    """Every aggregation has its clients and each (round, model) with clients its aggregation;
    every model a round assigned clients to was trained; participants add up."""
    c, m, bad = rd.clients, rd.metrics, []
    agg = {(int(r), int(k)) for r, k in zip(m["round"], m["model"]) if r >= 1}
    trained = c[c["model"] >= 0]
    if rd.protocol != "async":
        if rd.all_rows:
            have = {(int(r), int(k)) for r, k in zip(trained["round"], trained["model"])}
            if not rd.multi:
                have = {(r, 0) for r in c["round"].unique()}
            missing = sorted(agg - have)
            if missing:
                bad.append(f"metrics rows without clients.csv rows: {missing[:4]}")
            extra = sorted(have - agg)
            last = max([r for r, _ in have], default=0)
            unexplained = [x for x in extra if not (x[0] == last and rd.ended_early)]
            if unexplained:
                bad.append(f"clients.csv rounds of a model without an aggregation: {unexplained[:4]}")
        if rd.M > 1:                           # a model that was assigned clients was aggregated
            last = int(c["round"].max()) if len(c) else 0
            for k in range(rd.M):
                rounds_k = trained.loc[trained["model"] == k, "round"]
                cut = rd.ended_early and len(rounds_k) and (rounds_k == last).all()   # its round cut by the budget
                if len(rounds_k) and not cut and not any(kk == k for _, kk in agg):
                    bad.append(f"model {k} was assigned clients but never aggregated")
        sel = trained[trained["selected"].astype(bool) & ~trained["dropped"].astype(bool)]
        arrived = sel.groupby(["round", "model"]).size()
        for r in m[m["round"] >= 1].itertuples():
            got = int(arrived.get((int(r.round), int(r.model)), 0))
            if rd.all_rows or rd.config.get("output", {}).get("clients_csv") == "participants":
                if got != int(r.participants):
                    bad.append(f"round {r.round} model {r.model}: participants {r.participants} but {got} "
                               "selected clients not dropped")
                    break
    elif (m.loc[m["round"] >= 1, "participants"] != 1).any():
        bad.append("an async merge with participants != 1")
    if rd.summary["status"] == "complete" and not rd.multi and rd.summary["rounds"] > 0 and not agg:
        bad.append("a complete run with rounds but no aggregation recorded")
    return bad


def weights(rd: RunDir) -> list:
    c, bad = rd.clients, []
    total = _weights_total(rd)
    w = c["weight"].to_numpy(float)
    if not np.isfinite(w).all():
        bad.append("non-finite aggregation weight")
    if (w[c["dropped"].astype(bool).to_numpy()] != 0).any():
        bad.append("a dropped client has a non-zero weight")
    if (w[~c["selected"].astype(bool).to_numpy()] != 0).any():
        bad.append("a client that was not selected has a non-zero weight")
    if total is not None:
        for (r, k), g in c[c["weight"] != 0].groupby(["round", "model"]):
            if abs(g["weight"].sum() - total) > 1e-6:
                bad.append(f"round {r} model {k}: weights sum to {g['weight'].sum():.9g}, not {total}")
                break
    return bad


def _weights_total(rd: RunDir):
    """The documented total of one aggregation's weights, from an instance of the run's algorithm
    (some depend on its parameters: FedAsync-interval's 1 - gamma, SCAFFOLD's single uplink)."""
    import torch

    from emulator import registry
    from emulator.scenario import schema as scenario
    from emulator.algorithms.base import AlgoContext
    algo = scenario.load(rd.path / "config.yaml").algorithm
    ctx = AlgoContext(task=0, dim=1, num_clients=rd.N, client_sizes=np.ones(rd.N, dtype=np.int64),
                      x0=torch.zeros(1), rng=np.random.default_rng(0))
    return registry.get("algorithm", algo.name).factory(algo, ctx).weights_total


def _delay(active_per_round, n):
    """FedSUM Eq. (3)-(4), written again: tau^t = t - min_i s_i^t (t 0-based, s_i = -1 before)."""
    s = np.full(n, -1)
    tau = []
    for t, act in enumerate(active_per_round):
        s[list(act)] = t
        tau.append(t - s.min())
    return np.array(tau, dtype=np.int64), s


def delays(rd: RunDir) -> list:
    """metrics.csv tau, summary.json delay and partition.csv last_aggregated_round, each equal to
    the delay recomputed from clients.csv's aggregated rows (weight > 0) of real aggregations."""
    c, m, bad = rd.clients, rd.metrics, []
    for k in range(rd.M):
        mk = m[(m["model"] == k) & (m["round"] >= 1)]
        rounds = mk["round"].astype(int).tolist()
        act = c[(c["model"] == k) & (c["weight"] > 0)].groupby("round")["client"].apply(list)
        tau, s = _delay([act.get(r, []) for r in rounds], rd.N)
        got = mk["tau"].to_numpy() if "tau" in mk else np.zeros(0)
        if len(rounds) and not np.array_equal(got, tau):
            bad.append(f"model {k}: metrics tau {got[:8]} != recomputed {tau[:8]}")
        d = (rd.summary.get("delay") or {}).get(str(k))
        if len(rounds):
            want = {"tau_max": int(tau.max()), "tau_avg": float(tau.mean()), "never_aggregated": int((s < 0).sum())}
            if d is None or d["tau_max"] != want["tau_max"] or abs(d["tau_avg"] - want["tau_avg"]) > 1e-12 \
                    or d["never_aggregated"] != want["never_aggregated"]:
                bad.append(f"model {k}: summary delay {d} != recomputed {want}")
            col = "last_aggregated_round" + ("" if rd.M == 1 else f"_m{k}")
            last = np.array([0] + rounds)[s + 1]
            if col in rd.partition and not np.array_equal(rd.partition[col].to_numpy(), last):
                bad.append(f"partition.csv {col} != recomputed")
    return bad


def _message_sizes(rd: RunDir, dim: int) -> set:
    net = rd.config.get("network", {})
    bpp, over = int(net.get("bytes_per_param", 4)), int(net.get("overhead_bytes", 0))
    comp = net.get("compression", {}) or {}
    out = {}
    for d in ("up", "down"):
        ratio = float(comp.get(d, 1.0))
        out[d] = {int(math.ceil(round(dim * v * bpp * ratio, 9))) + over for v in (1, 2, 3)}
    return out


def bytes_(rd: RunDir) -> list:
    """Per-client bytes add up to metrics.csv and summary.json; every message has one of the
    sizes the model's vectors give (1, 2 or 3 model-sized vectors per message)."""
    c, m, bad = rd.clients, rd.metrics, []
    if rd.all_rows:
        per = c.groupby(["round", "model"])[["bytes_up", "bytes_down"]].sum()
        for r in m[m["round"] >= 1].itertuples():
            key = (int(r.round), int(r.model))
            if rd.protocol == "async":
                got = c[(c["round"] == key[0]) & ~c["dropped"].astype(bool)][["bytes_up", "bytes_down"]].sum()
            else:
                got = per.loc[key] if key in per.index else pd.Series({"bytes_up": 0, "bytes_down": 0})
            if int(got["bytes_up"]) != int(r.bytes_up) or int(got["bytes_down"]) != int(r.bytes_down):
                bad.append(f"round {r.round} model {r.model}: metrics bytes {r.bytes_up}/{r.bytes_down} != "
                           f"clients {int(got['bytes_up'])}/{int(got['bytes_down'])}")
                break
    for key in ("bytes_up", "bytes_down"):
        if int(m[key].sum()) != int(rd.summary[key]):
            bad.append(f"summary {key} {rd.summary[key]} != metrics total {int(m[key].sum())}")
    for k in range(rd.M):
        dim = int(rd.summary["models"][k]["params"])
        sizes = _message_sizes(rd, dim)
        ck = c[c["model"] == k]
        for d in ("up", "down"):
            vals = set(ck.loc[ck[f"bytes_{d}"] > 0, f"bytes_{d}"].astype(int))
            if len(vals) > 1:
                bad.append(f"model {k}: {d}loads of different sizes {sorted(vals)[:4]} (one message per client and round)")
            elif vals and not vals <= sizes[d]:
                bad.append(f"model {k}: {d}load of {vals} bytes; messages of {dim} x 1..3 parameters are {sorted(sizes[d])}")
    if (c.loc[~c["selected"].astype(bool), "bytes_up"] > 0).any():
        bad.append("a client that was not selected uploaded")
    return bad


def times(rd: RunDir) -> list:
    """Times are finite and non-negative; a participant's compute and communication fit in its
    round; rounds follow each other (intervals: back to back, async: merge after merge)."""
    c, m, bad = rd.clients, rd.metrics, []
    for col in ("compute_time", "comm_time"):
        v = c[col].to_numpy(float)
        if not np.isfinite(v).all() or (v < -EPS).any():
            bad.append(f"negative or non-finite {col}")
    if (c["steps"] < 0).any():
        bad.append("negative steps")
    agg = m[m["round"] >= 1]
    if rd.protocol in ("rounds", "intervals", "multi_model") and "round_time" in agg:
        rt = agg.set_index(["round", "model"])["round_time"]
        part = c[c["selected"].astype(bool) & (c["model"] >= 0)]
        for r in part.itertuples():
            key = (int(r.round), int(r.model))
            if key in rt.index and r.compute_time + r.comm_time > rt.loc[key] * (1 + 1e-9) + 1e-9:
                bad.append(f"round {r.round} client {r.client}: {r.compute_time + r.comm_time:.9g}s of work in a "
                           f"{rt.loc[key]:.9g}s round")
                break
    if rd.protocol == "intervals" and len(agg):
        delta = float(rd.config["protocol"]["interval"])
        if not np.allclose(agg["round_time"], delta, rtol=1e-9, atol=1e-12):
            bad.append("an interval whose round_time is not `interval`")
        if not np.allclose(agg["virtual_time"], agg["round"] * delta, rtol=1e-9, atol=1e-9):
            bad.append("interval t does not end at t x interval")
    if rd.protocol == "async" and len(agg) > 1 and "round_time" in agg:
        gaps = np.diff(m.loc[m["round"] >= 0, "virtual_time"].to_numpy())
        if not np.allclose(gaps, agg["round_time"].to_numpy(), rtol=1e-9, atol=1e-9):
            bad.append("async round_time is not the time since the previous merge")
    if rd.protocol == "rounds" and len(agg):
        prev = np.r_[0.0, agg["virtual_time"].to_numpy()[:-1]]
        if (agg["virtual_time"].to_numpy() - agg["round_time"].to_numpy() < prev - 1e-9).any():
            bad.append("a round started before the previous one ended")
    return bad


def summary_figures(rd: RunDir) -> list:
    s, m, c, bad = rd.summary, rd.metrics, rd.clients, []
    run = rd.config["run"]
    top = int(m["round"].max()) if len(m) else 0
    if not rd.multi and s["rounds"] != top:
        bad.append(f"summary rounds {s['rounds']} != last metrics round {top}")
    if rd.multi and s["rounds"] < top:
        bad.append(f"summary rounds {s['rounds']} < last metrics round {top}")
    if run.get("rounds") is not None and s["rounds"] > run["rounds"]:
        bad.append(f"{s['rounds']} rounds, more than run.rounds = {run['rounds']}")
    if s["status"] in ("complete", "empty") and run.get("virtual_time") is None and rd.protocol in ("rounds", "intervals", "async") \
            and s["rounds"] != run["rounds"]:
        bad.append(f"complete after {s['rounds']} of run.rounds = {run['rounds']}")
    if abs(s["virtual_time"] - float(m["virtual_time"].max())) > 1e-9 and not rd.ended_early \
            and rd.protocol != "async" and not rd.multi:
        bad.append(f"summary virtual_time {s['virtual_time']} != last aggregation {m['virtual_time'].max()}")
    if rd.all_rows:
        col = c["sgd_steps"] if "sgd_steps" in c else c["steps"]
        if int(col.sum()) != int(s["grad_steps_virtual"]):
            bad.append(f"grad_steps_virtual {s['grad_steps_virtual']} != clients.csv steps {int(col.sum())}")
    if s["grad_steps_computed"] < 0 or s["grad_steps_skipped"] < 0:
        bad.append("negative gradient step counts")
    if rd.summary["status"] == "complete" and run.get("rounds") is not None and run.get("virtual_time") is None \
            and not rd.multi and s["rounds"] == run["rounds"]:
        last = m[m["round"] == s["rounds"]]
        if "test_loss" in last and last["test_loss"].isna().any():
            bad.append("the last aggregation was not evaluated")
    return bad


STATES = {"selected", "downloading", "computing", "uploading", "done", "dropped", "offline"}


def events(rd: RunDir) -> list:
    if rd.events is None:
        return ["output.events is true but events.csv is missing"] if rd.config.get("output", {}).get("events") else []
    e, bad = rd.events, []
    if (np.diff(e["time"].to_numpy(float)) < -EPS).any():
        bad.append("events.csv goes back in time")
    unknown = set(e["state"]) - STATES
    if unknown:
        bad.append(f"unknown states {sorted(unknown)}")
    return bad


# ---------------------------------------------------------------------------- comparing runs
WALL = ("wall_time", "setup_wall_time")
HOW = ("executor_paths",)          # which executor path ran each job: differs between executors by design


def _strip_wall(x):
    if isinstance(x, dict):
        return {k: _strip_wall(v) for k, v in x.items() if "wall" not in k and k not in HOW}
    if isinstance(x, list):
        return [_strip_wall(v) for v in x]
    return x


def _frames_differ(a: pd.DataFrame, b: pd.DataFrame, rtol: float, atol: float, name: str) -> list:
    a = a.drop(columns=[c for c in WALL if c in a])
    b = b.drop(columns=[c for c in WALL if c in b])
    if list(a.columns) != list(b.columns) or a.shape != b.shape:
        return [f"{name}: columns / shape differ ({a.shape} {list(a.columns)[:12]} vs {b.shape} {list(b.columns)[:12]})"]
    bad = []
    for col in a.columns:
        x, y = a[col].to_numpy(), b[col].to_numpy()
        if rtol == 0 and atol == 0 or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(y.dtype, np.floating)):
            same = pd.Series(x).equals(pd.Series(y)) or (pd.isna(x) & pd.isna(y) | (x == y)).all()
        else:
            same = np.allclose(x.astype(float), y.astype(float), rtol=rtol, atol=atol, equal_nan=True)
        if not same:
            i = int(np.flatnonzero(~((x == y) | (pd.isna(x) & pd.isna(y))))[0]) if len(x) else 0
            bad.append(f"{name}.{col} differs (row {i}: {x[i]!r} vs {y[i]!r})")
    return bad


def compare(dir_a, dir_b, rtol: float = 0.0, atol: float = 0.0) -> list:
    """Differences between two run directories, wall-clock figures left out: exactly (the same
    seed on the same executor) or within a float tolerance (another executor)."""
    a, b = Path(dir_a), Path(dir_b)
    bad = []
    for name in ("metrics.csv", "clients.csv", "partition.csv", "events.csv"):
        fa, fb = a / name, b / name
        if fa.exists() != fb.exists():
            bad.append(f"{name} in one run only")
        elif fa.exists():
            bad += _frames_differ(pd.read_csv(fa), pd.read_csv(fb), rtol, atol, name)
    for fa in sorted(a.glob("*.npy")):
        fb = b / fa.name
        if not fb.exists():
            bad.append(f"{fa.name} in one run only")
            continue
        x, y = np.load(fa), np.load(fb)
        if x.shape != y.shape or not (np.array_equal(x, y) if rtol == 0 and atol == 0
                                      else np.allclose(x, y, rtol=rtol, atol=atol)):
            bad.append(f"{fa.name} differs (max |diff| {np.abs(x - y).max() if x.shape == y.shape else 'shape'})")
    sa = _strip_wall(json.loads((a / "summary.json").read_text()))
    sb = _strip_wall(json.loads((b / "summary.json").read_text()))
    bad += [f"summary.json {d}" for d in _dict_diff(sa, sb, rtol, atol)]
    return bad


def _dict_diff(x, y, rtol, atol, path="") -> list:
    if isinstance(x, dict) and isinstance(y, dict):
        out = []
        for k in sorted(set(x) | set(y)):
            if k not in x or k not in y:
                out.append(f"{path}.{k} in one only")
            else:
                out += _dict_diff(x[k], y[k], rtol, atol, f"{path}.{k}")
        return out
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [d for i, (u, v) in enumerate(zip(x, y)) for d in _dict_diff(u, v, rtol, atol, f"{path}[{i}]")]
    if isinstance(x, float) and isinstance(y, float):
        if x == y or (math.isnan(x) and math.isnan(y)):       # equal infinities too (inf - inf is nan)
            return []
        return [] if abs(x - y) <= atol + rtol * abs(y) else [f"{path}: {x!r} vs {y!r}"]
    return [] if x == y else [f"{path}: {x!r} vs {y!r}"]
