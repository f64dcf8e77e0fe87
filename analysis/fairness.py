"""Who the model serves, from run directories (docs/fairness.md): the spread of per-client
accuracy from client_eval.csv and who took part per device group from clients.csv and
partition.csv, with the definitions the run itself uses (emulator/measures/fairness.py,
emulator/measures/group_shares.py): nothing here keeps a tally of its own.

- groups(study)                  device-group names in the fleet's order (every run's, merged)
- evaluations(client_eval, ...)  per evaluation: its virtual time and the metrics columns
- group_accuracy(study)          per run, model, evaluation and group: mean client accuracy
- participation(run)             per group over the run, and per round
- run_columns(run, ...)          the per-run columns `flemu compare` averages over seeds
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from emulator.measures import fairness as F
from emulator.measures import group_shares as G

SHARES = ("clients", "data", "selected", "weight", "steps")
PREFIXES = ("client_acc_", "acc_group_", "share_")    # the compare columns of this module


def run_groups(run) -> list:
    """The device-group names of one run, in its fleet's order."""
    return [g.get("name") for g in ((run.config or {}).get("clients") or {}).get("groups", [])]


def groups(study) -> list:
    """Every device-group name of the study's runs, in order of first appearance."""
    out: list = []
    for r in study.runs.values():
        out += [g for g in run_groups(r) if g not in out]
    return out


def evaluations(client_eval: pd.DataFrame, group_names) -> pd.DataFrame:
    """One row per evaluation (and model) of one run: evaluation, round, virtual_time and the
    metrics columns recomputed from its client_eval.csv rows."""
    keys = ["model", "evaluation"] if "model" in client_eval else ["evaluation"]
    rows = []
    for key, e in client_eval.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), "round": int(e["round"].iloc[0]),
                     "virtual_time": float(e["virtual_time"].iloc[0]),
                     **F.client_columns(e["acc"].to_numpy(), e["n"].to_numpy(), e["group"].astype(str).to_numpy(),
                                        group_names)})
    return pd.DataFrame(rows)


def group_accuracy(study) -> pd.DataFrame:
    """Long frame: run, condition, seed, model, evaluation, virtual_time, group, acc (the mean
    accuracy of the group's evaluated clients)."""
    names = groups(study)
    frames = []
    ce = study.client_eval
    for run, e in (ce.groupby("run", sort=False) if len(ce) else []):
        ev = evaluations(e.drop(columns=[c for c in ("run", "condition", "seed", *study.axes) if c in e]), names)
        if "model" not in ev:
            ev["model"] = 0
        long = ev.melt(id_vars=["model", "evaluation", "round", "virtual_time"],
                       value_vars=[F.group_column(g) for g in names], var_name="group", value_name="acc")
        long["group"] = long["group"].str.slice(len("acc_group_"))
        meta = study.summary.set_index("run").loc[run]
        frames.append(long.assign(run=run, condition=meta["condition"], seed=meta["seed"]))
    cols = ["run", "condition", "seed", "model", "evaluation", "round", "virtual_time", "group", "acc"]
    return pd.concat(frames, ignore_index=True)[cols].dropna(subset=["acc"]) if frames else pd.DataFrame(columns=cols)


def _partition(run):
    """(group of each client, its training samples) from partition.csv (model 0's samples)."""
    p = run.partition
    col = "samples" if "samples" in p else "samples_m0"
    return p["group"].astype(str).to_numpy(), p[col].to_numpy()


def participation(run, clients: pd.DataFrame = None) -> tuple:
    """(over the run {group: shares}, per round frame) of one run, from its clients.csv rows
    (`clients`: these rows instead, e.g. one model's) and partition.csv."""
    c = run.clients if clients is None else clients
    if c is None or c.empty or run.partition.empty:
        return {}, pd.DataFrame()
    group_of, samples = _partition(run)
    names = run_groups(run) or list(dict.fromkeys(group_of))
    return G.over_run(c, group_of, samples, names), G.per_round(c, group_of, names)


def run_columns(run, client_eval: pd.DataFrame, clients: pd.DataFrame, model=None) -> dict:
    """The columns of one run (one model) that `flemu compare` shows: the last evaluation's
    client_acc_* and acc_group_* (from client_eval.csv), and per group
    share_<measure>_<group> over the run (from clients.csv)."""
    out = {}
    names = run_groups(run)
    if client_eval is not None and len(client_eval):
        e = client_eval if model is None or "model" not in client_eval else client_eval[client_eval["model"] == model]
        ev = evaluations(e[["evaluation", "round", "virtual_time", "group", "n", "acc"]], names)
        if len(ev):
            last = ev.iloc[-1]
            out.update({k: float(last[k]) for k in (*F.SPREAD, *[F.group_column(g) for g in names])})
    shares, _ = participation(run, clients)
    for g, s in shares.items():
        for m in SHARES:
            out[f"share_{m}_{g}"] = s[m]
    return out


def group_table(cmp: pd.DataFrame, keys, names) -> pd.DataFrame:
    """Per condition (compare's `keys`) and device group, as strings: the group's share of the
    clients, of the data, of the selections, of the aggregated weight and of the SGD steps
    (mean over seeds), and its clients' mean accuracy at the last evaluation."""
    rows = []
    for _, r in cmp.iterrows():
        for g in names:
            if f"share_clients_{g}_mean" not in r or pd.isna(r[f"share_clients_{g}_mean"]):
                continue
            row = {k: str(r[k]) for k in keys}
            row["group"] = g
            for m in SHARES:
                v = r.get(f"share_{m}_{g}_mean", np.nan)
                row[m] = "-" if pd.isna(v) else f"{100 * v:.1f} %"
            v = r.get(f"{F.group_column(g)}_mean", np.nan)
            row["accuracy"] = "-" if pd.isna(v) else f"{v:.3f}"
            rows.append(row)
    return pd.DataFrame(rows)
