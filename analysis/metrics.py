"""Metrics on run frames (metrics.csv / clients.csv as pandas), one function per figure of merit.

Every function takes the frames of one run (rows of one model where it matters) and returns
numbers; `run_metrics` applies them all to every run of a Study and `compare` averages them
over seeds per condition. Definitions:

- time / rounds to target: the first evaluation with test accuracy >= target (NaN: never).
- accuracy at a time budget: the last evaluated accuracy at or before the budget (the model
  the fleet had by then).
- AUC: the area under the accuracy-vs-virtual-time step curve (each evaluation holds until
  the next) from 0 to a horizon, divided by the horizon: the time-averaged accuracy, in
  [0, 1]; runs compared on the same horizon.
- round latency (per aggregation, mean over the selected clients): compute, communication,
  waiting = round time - compute - communication (idle until the round closes). Async
  protocols have no rounds to wait for: a client's job is its compute + communication.
- straggler share: the share of round time spent waiting on the slowest clients: per round
  round_time - median(busy time of the selected clients), summed, over the summed round
  time (`reference="second"`: after all but the slowest one had finished). 0 for `async`
  and `intervals` (T-SFL), whose server never waits on a client.
- participation: aggregations each client was in (weight > 0), availability, drops.
- who the model serves (analysis/fairness.py, docs/fairness.md): the last evaluation's
  client_acc_* / acc_group_<g> (client_eval.csv), per group share_<measure>_<g> (clients.csv).
- FedSUM delay metrics (docs/algorithms/fedsum.md 2.1): tau^t = t - min_i s_i^t from the weight > 0 sets.
- T-SFL heterogeneity degree delta = population variance of tau over clients (docs/algorithms/tsfl.md
  fn. 1): the protocol's `heterogeneity` column where recorded (intervals), else the
  variance of the local steps of each round's selected clients, averaged over rounds.
- multi-model gain g = M * T_1(eps) / T_P(M, eps) (docs/algorithms/multimodel.md section 3).
"""
from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np
import pandas as pd

from . import fairness
from .load import FINISHED, left_out, left_out_lines  # noqa: F401  (re-exported: the runs a table leaves out)

NAN = float("nan")


def _one_model(m: pd.DataFrame, model: int = 0) -> pd.DataFrame:
    if "model" in m and m["model"].nunique() > 1:
        return m[m["model"] == model]
    return m


def _evals(m: pd.DataFrame, y: str) -> pd.DataFrame:
    if y not in m:
        return m.iloc[0:0]
    return _one_model(m).dropna(subset=[y]).sort_values(["virtual_time", "round"])


# --------------------------------------------------------------------------- accuracy over time
def first_reach(metrics: pd.DataFrame, target: float, y: str = "test_acc", higher: bool = True) -> dict:
    """{round, virtual_time} of the first evaluation meeting the target (NaN if none)."""
    e = _evals(metrics, y)
    hit = e[e[y] >= target] if higher else e[e[y] <= target]
    if hit.empty:
        return {"round": NAN, "virtual_time": NAN}
    r = hit.iloc[0]
    return {"round": int(r["round"]), "virtual_time": float(r["virtual_time"])}


def time_to_target(metrics, target, y="test_acc") -> float:
    return first_reach(metrics, target, y)["virtual_time"]


def rounds_to_target(metrics, target, y="test_acc") -> float:
    return first_reach(metrics, target, y)["round"]


def accuracy_at(metrics: pd.DataFrame, budget: float, y: str = "test_acc", x: str = "virtual_time") -> float:
    """The last evaluated `y` at or before `budget` (seconds, or rounds with x='round')."""
    e = _evals(metrics, y)
    e = e[e[x] <= budget * (1 + 1e-12) + 1e-12]
    return float(e[y].iloc[-1]) if len(e) else NAN


def auc(metrics: pd.DataFrame, y: str = "test_acc", x: str = "virtual_time", until: Optional[float] = None,
        normalize: bool = True) -> float:
    """Area under the step curve of `y` (each evaluation holds until the next) from the first
    evaluation to `until` (default: the last evaluation); divided by that span if `normalize`."""
    e = _evals(metrics, y)
    if e.empty:
        return NAN
    xs = e[x].to_numpy(float)
    ys = e[y].to_numpy(float)
    end = xs[-1] if until is None else float(until)
    if end <= xs[0]:
        return NAN
    right = np.minimum(np.append(xs[1:], end), end)
    width = np.clip(right - xs, 0, None)
    area = float(np.sum(width * ys))
    return area / (end - xs[0]) if normalize else area


# --------------------------------------------------------------------------- time per round
def round_latency(clients: pd.DataFrame, metrics: pd.DataFrame, protocol: Optional[str] = None) -> pd.DataFrame:
    """Per aggregation: round_time and, averaged over its selected clients, compute, comm and
    waiting seconds; busy_median / busy_second (the median and second-largest busy time) and
    straggler_wait = round_time - busy_median."""
    cols = ["round", "round_time", "compute", "comm", "waiting", "busy_median", "busy_second", "straggler_wait"]
    if clients is None or clients.empty:
        return pd.DataFrame(columns=cols)
    c = clients[clients["selected"].astype(bool)] if "selected" in clients else clients
    if "model" in c and c["model"].nunique() > 1:
        c = c[c["model"] == 0]
    busy = c["compute_time"] + c["comm_time"]
    g = c.assign(busy=busy).groupby("round")
    out = pd.DataFrame({"compute": g["compute_time"].mean(), "comm": g["comm_time"].mean(),
                        "busy_median": g["busy"].median(),
                        "busy_second": g["busy"].apply(lambda b: np.sort(b.to_numpy())[-2] if len(b) > 1 else 0.0)})
    if protocol == "async":
        out["round_time"] = out["compute"] + out["comm"]
        out["waiting"] = 0.0
    else:
        m = _one_model(metrics)
        rt = m.set_index("round")["round_time"] if "round_time" in m else pd.Series(dtype=float)
        out["round_time"] = rt.reindex(out.index)
        wait = (out["round_time"].reindex(c["round"]).to_numpy() - busy.to_numpy())
        out["waiting"] = pd.Series(np.clip(wait, 0, None), index=c["round"].to_numpy()).groupby(level=0).mean()
    out["straggler_wait"] = (out["round_time"] - out["busy_median"]).clip(lower=0)
    return out.reset_index()[cols]


def straggler_share(clients: pd.DataFrame, metrics: pd.DataFrame, reference: str = "median",
                    protocol: Optional[str] = None) -> float:
    """Share of the total round time the server spent waiting on its slowest clients after the
    median selected client had finished (`reference="second"`: after all but the slowest).
    0 for `async` and `intervals`: there the server never waits on a client (intervals close
    on the clock; a client that cannot make it is dropped, which participation shows)."""
    if protocol in ("async", "intervals"):
        return 0.0
    lat = round_latency(clients, metrics).dropna(subset=["round_time"])
    if lat.empty or lat["round_time"].sum() <= 0:
        return NAN
    ref = lat["busy_median"] if reference == "median" else lat["busy_second"]
    return float((lat["round_time"] - ref).clip(lower=0).sum() / lat["round_time"].sum())


# --------------------------------------------------------------------------- who took part
def participation_stats(clients: pd.DataFrame, protocol: Optional[str] = None, rounds=None) -> dict:
    """Per run: mean participants per aggregation; per-client participation rate (share of
    aggregations it was in, weight > 0): mean, min, max, coefficient of variation; clients
    never aggregated; mean availability; drop rate (dropped / selected). `rounds`: the
    aggregations (metrics.csv rounds >= 1): a round the time budget cut before it aggregated
    has rows in clients.csv but is no aggregation, so it counts in no rate (default: every
    round in clients.csv). Under `async` clients.csv has one row per client job, not per
    client per merge, so the fleet's availability is not recorded there: `availability_mean`
    is NaN, and `rounds` is not applied (job keys are not merge numbers)."""
    if clients is None or clients.empty:
        return {}
    c = clients
    if rounds is not None and protocol != "async":
        c = c[c["round"].isin(list(rounds))]
        if c.empty:
            return {}
    n_rounds = c["round"].nunique()
    agg = c["weight"] > 0
    per_client = agg.groupby(c["client"]).sum() / max(n_rounds, 1)
    sel = c["selected"].astype(bool).sum() if "selected" in c else 0
    avail = NAN if protocol == "async" or "available" not in c else float(c["available"].astype(bool).mean())
    return {"participants_mean": float(agg.groupby(c["round"]).sum().mean()),
            "participation_rate_mean": float(per_client.mean()),
            "participation_rate_min": float(per_client.min()),
            "participation_rate_max": float(per_client.max()),
            "participation_cv": float(per_client.std(ddof=0) / per_client.mean()) if per_client.mean() > 0 else NAN,
            "never_aggregated": int((per_client == 0).sum()),
            "availability_mean": avail,
            "drop_rate": float(c["dropped"].astype(bool).sum() / sel) if sel else NAN}


def delay_stats(clients: pd.DataFrame, num_clients: Optional[int] = None, rounds=None) -> dict:
    """FedSUM delay metrics from clients.csv (active set of aggregation t: weight > 0):
    per-round tau, tau_max, tau_avg (emulator.measures.participation.delay_metrics). `rounds`: the
    aggregations (metrics.csv rounds >= 1; default every round in clients.csv), so rows of
    work no aggregation used (a lost async job) are not counted as rounds; `num_clients`:
    the fleet size (default: the largest client id + 1)."""
    from emulator.measures.participation import delay_metrics
    if clients is None or clients.empty:
        return {"tau": np.zeros(0, int), "tau_max": 0, "tau_avg": 0.0}
    n = num_clients or int(clients["client"].max()) + 1
    rounds = sorted(clients["round"].unique()) if rounds is None else list(rounds)
    act = clients[clients["weight"] > 0].groupby("round")["client"].apply(np.asarray)
    d = delay_metrics([act.get(r, np.zeros(0, np.int64)) for r in rounds], n)
    return {"tau": d["tau"], "tau_max": d["tau_max"], "tau_avg": d["tau_avg"]}


def heterogeneity_degree(tau) -> float:
    """T-SFL fn. 1: delta = (1/N) sum_i (tau_i - mean tau)^2 (population variance)."""
    t = np.asarray(tau, dtype=float)
    return float(np.var(t)) if t.size else NAN


def heterogeneity(metrics: pd.DataFrame, clients: Optional[pd.DataFrame] = None) -> float:
    """Mean heterogeneity degree over aggregations: the recorded `heterogeneity` column
    (intervals protocol), else per round the variance of the selected clients' local steps."""
    if "heterogeneity" in metrics and metrics["heterogeneity"].notna().any():
        return float(metrics["heterogeneity"].dropna().mean())
    if clients is None or clients.empty:
        return NAN
    c = clients[clients["selected"].astype(bool)] if "selected" in clients else clients
    per = c.groupby("round")["steps"].apply(heterogeneity_degree)
    return float(per.mean()) if len(per) else NAN


# --------------------------------------------------------------------------- multi-model gain
def multimodel_gain(M: int, T1: float, TP: float) -> float:
    """g_P(M, eps) = M * T_1(eps) / T_P(M, eps) (docs/algorithms/multimodel.md Eq. 3); NaN if either is."""
    if T1 is None or TP is None or not np.isfinite(T1) or not np.isfinite(TP) or TP <= 0:
        return NAN
    return float(M * T1 / TP)


def all_models_round(metrics: pd.DataFrame, thresholds, y: str = "test_acc", higher: bool = True) -> float:
    """The first round at which every model's latest evaluation meets its threshold (a number
    for all, or {model: threshold}); NaN if never."""
    e = metrics.dropna(subset=[y])
    models = sorted(e["model"].unique()) if "model" in e else [0]
    if "model" not in e:
        e = e.assign(model=0)
    wide = e.pivot_table(index="round", columns="model", values=y, aggfunc="last").sort_index().ffill()
    th = pd.Series({m: (thresholds[m] if isinstance(thresholds, dict) else thresholds) for m in models})
    ok = (wide[models] >= th) if higher else (wide[models] <= th)
    hit = ok.all(axis=1)
    return float(hit[hit].index[0]) if hit.any() else NAN


def multimodel_gain_from_runs(single, multi: pd.DataFrame, eps=None, T1: Optional[int] = None,
                              y: str = "test_acc", higher: bool = True) -> float:
    """Gain from a single-model run's metrics (`single`) and a multi-model run's (`multi`,
    with a `model` column), two ways (docs/algorithms/multimodel.md section 3):
    - `eps` given: T_1 = rounds for the single-model run to reach eps, T_P = first round at
      which every model of the multi-model run meets eps;
    - `T1` given (the data experiments): eps_m = the single-model accuracy after T1 rounds
      (`single` a frame, or {model: frame} per model), T_P = first round every model meets its own."""
    M = int(multi["model"].nunique()) if "model" in multi else 1
    if eps is not None:
        s = single if isinstance(single, pd.DataFrame) else next(iter(single.values()))
        t1 = first_reach(s, eps, y, higher)["round"]
        tp = all_models_round(multi, eps, y, higher)
        return multimodel_gain(M, t1, tp)
    if T1 is None:
        raise ValueError("give eps or T1")
    frames = single if isinstance(single, dict) else {m: single for m in range(M)}
    th = {m: accuracy_at(f, T1, y, x="round") for m, f in frames.items()}
    return multimodel_gain(M, T1, all_models_round(multi, th, y, higher))


# --------------------------------------------------------------------------- a whole study
def _protocol(run) -> Optional[str]:
    p = (run.config or {}).get("protocol") if run is not None else None
    return p.get("name") if isinstance(p, dict) else p


def run_metrics(study, target: Optional[float] = None, budget: Optional[float] = None,
                horizon: Optional[float] = None) -> pd.DataFrame:
    """One row per run of the study with every metric above. `target` defaults to the study's
    target accuracy; the AUC horizon defaults to `budget`, else the shortest run's final
    virtual time (every run integrated over the same span)."""
    target = target if target is not None else study.target
    s = study.summary
    done = s[s["run"].isin(list(study.runs)) & s["status"].isin(FINISHED)]
    if horizon is None:
        horizon = budget if budget is not None else (float(done["virtual_time"].min()) if len(done) else None)
    mg = dict(tuple(study.metrics.groupby("run"))) if len(study.metrics) else {}
    cg = dict(tuple(study.clients.groupby("run"))) if len(study.clients) else {}
    eg = dict(tuple(study.client_eval.groupby("run"))) if len(study.client_eval) else {}
    rows = []
    for _, r in s.iterrows():
        row = {k: r.get(k) for k in study.keys()}
        row.update(status=r.get("status"), error=r.get("error", ""))
        run = study.runs.get(r["run"])
        if run is None or r.get("status") not in FINISHED:      # left out (left_out): no figures
            rows.append(row)
            continue
        m_all = mg.get(r["run"], run.metrics)
        c_all = cg.get(r["run"], pd.DataFrame())
        proto = _protocol(run)
        row.update(protocol=proto, rounds=r.get("rounds"), virtual_time=r.get("virtual_time"),
                   wall_time=r.get("wall_time"))
        models = sorted(m_all["model"].unique()) if "model" in m_all and m_all["model"].nunique() > 1 else [None]
        base = row
        for model in models:                       # multi-model runs: one row per model
            row = dict(base)
            if model is None:
                m, c = m_all, c_all
            else:
                row["model"] = int(model)
                m = m_all[m_all["model"] == model]
                c = c_all[c_all["model"] == model] if "model" in c_all else c_all
            row = _run_row(row, m, c, run, proto, target, budget, horizon)
            row.update(fairness.run_columns(run, eg.get(r["run"]), c, model))     # who the model serves
            rows.append(row)
    return pd.DataFrame(rows)


def _run_row(row, m, c, run, proto, target, budget, horizon) -> dict:
    """The metrics of one run (one model of a multi-model run): m, c its metrics and clients."""
    e = _evals(m, "test_acc")
    row["final_acc"] = float(e["test_acc"].iloc[-1]) if len(e) else NAN
    row["best_acc"] = float(e["test_acc"].max()) if len(e) else NAN
    if target is not None:
        hit = first_reach(m, target)
        row["rounds_to_target"], row["time_to_target"] = hit["round"], hit["virtual_time"]
    if budget is not None:
        row["acc_at_budget"] = accuracy_at(m, budget)
    row["auc"] = auc(m, until=horizon)
    if len(c):
        lat = round_latency(c, m, proto)
        row.update(compute_s=float(lat["compute"].mean()), comm_s=float(lat["comm"].mean()),
                   waiting_s=float(lat["waiting"].mean()), round_time_s=float(lat["round_time"].mean()))
        row["straggler_share"] = straggler_share(c, m, protocol=proto)
        aggregations = sorted(int(r) for r in m["round"].unique() if r >= 1) if len(m) else None
        row.update(participation_stats(c, proto, aggregations))
        count = ((run.config or {}).get("clients") or {}).get("count")
        d = delay_stats(c, count, aggregations)
        row["tau_max"], row["tau_avg"] = d["tau_max"], d["tau_avg"]
    row["heterogeneity"] = heterogeneity(m, c if len(c) else None)
    return row


COMPARE_METRICS = ["final_acc", "best_acc", "rounds_to_target", "time_to_target", "acc_at_budget", "auc",
                   "straggler_share", "round_time_s", "waiting_s", "participants_mean", "participation_cv",
                   "tau_avg", "tau_max", "heterogeneity", "wall_time"]


def compare(study, target: Optional[float] = None, budget: Optional[float] = None, by=None,
            per_run: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Per condition (or per `by` columns): runs, failed, reached (runs that reached the
    target), and mean / std over seeds of each metric (time and rounds to target: over the
    runs that reached it)."""
    pr = per_run if per_run is not None else run_metrics(study, target, budget)
    by = list(by) if by else (study.axes or ["condition"])
    missing = [k for k in by if k not in pr]
    if missing:
        pr = pr.assign(**{k: pr["run"].map(lambda r, k=k: config_value(study, r, k)) for k in missing})
    if not study.axes and by == ["condition"]:
        by = ["condition"]
    if "model" in pr and pr["model"].notna().any() and "model" not in by:
        by = by + ["model"]                        # multi-model runs: every model, not model 0
    rows = []
    extra = [k for k in pr.columns if k.startswith(fairness.PREFIXES)]    # per device group: dynamic
    for key, g in pr.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        ok = g[g["status"].isin(FINISHED)]
        row["runs"] = len(g)
        row["failed"] = int((~g["status"].isin(FINISHED)).sum())     # left out: crashed, failed, invalid, empty
        if "time_to_target" in g:
            row["reached"] = int(ok["time_to_target"].notna().sum())
        for k in COMPARE_METRICS + extra:
            if k in ok and ok[k].notna().any():
                v = pd.to_numeric(ok[k], errors="coerce")
                row[f"{k}_mean"] = float(v.mean())
                row[f"{k}_std"] = float(v.std(ddof=1)) if v.notna().sum() > 1 else NAN
        rows.append(row)
    return pd.DataFrame(rows)


def config_value(study, run: str, path: str):
    """The value at a scenario path (`algorithm.name`, `clients.groups[0].compute.model`) in a
    run's resolved config.yaml: how `compare --by` groups runs by what was not swept. A path
    none of the study's runs has is a ValueError naming it."""
    if not any(_walk(r.config, path) is not _MISSING for r in study.runs.values()):
        raise ValueError(f"--by {path}: neither a column of the runs nor a scenario path in their config.yaml "
                         f"(columns: {', '.join(sorted(study.keys()))}; paths look like algorithm.name)")
    r = study.runs.get(run)
    v = _walk(r.config, path) if r is not None else _MISSING
    v = None if v is _MISSING else v
    if isinstance(v, dict):                       # a component block: its name
        v = v.get("name") or v.get("model") or str(v)
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


_MISSING = object()


def _walk(cfg, path: str):
    node = cfg
    for name, idx in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        if idx:
            if not isinstance(node, list) or int(idx) >= len(node):
                return _MISSING
            node = node[int(idx)]
        elif isinstance(node, dict) and name in node:
            node = node[name]
        else:
            return _MISSING
    return node


def fmt(v, std=None, digits=3) -> str:
    """'0.912 ± 0.004' / '-' for tables."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    s = f"{v:.{digits}g}" if abs(v) >= 1000 else f"{v:.{digits}f}" if abs(v) < 10 else f"{v:.1f}"
    if std is not None and not (isinstance(std, float) and math.isnan(std)):
        s += f" ± {std:.{digits}f}" if abs(std) < 10 else f" ± {std:.1f}"
    return s
