"""Who took part, per device group (docs/fairness.md, "Who took part"): computed from the
rows of clients.csv (the run writes them; `analysis` reads them back), never from a tally of
its own. For device group g, over the run or over one round's rows:

- clients    N_g / N, the group's share of the fleet
- data       sum of its clients' training samples / all training samples (partition.csv)
- selected   its rows with `selected` / all selected rows (the selector's choices)
- weight     its aggregation weight / all aggregation weight (clients.csv `weight`, rows with weight > 0)
- steps      its local SGD steps / all local SGD steps (`sgd_steps` where recorded, else `steps`)
- ratio      selected / clients: 1 when the group is selected in proportion to its size
- never      the share of its clients never selected (over the run only)

A share whose total is 0 (no selection yet) is NaN. Shares of the groups sum to 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MEASURES = ("selected", "weight", "steps")


def _amounts(clients: pd.DataFrame) -> pd.DataFrame:
    """Per row: selected (0/1), aggregated weight (> 0 only) and SGD steps."""
    steps = clients["sgd_steps"] if "sgd_steps" in clients else clients["steps"]
    w = clients["weight"].astype(float)
    return pd.DataFrame({"selected": clients["selected"].astype(bool).astype(float),
                         "weight": w.where(w > 0, 0.0), "steps": steps.astype(float)}, index=clients.index)


def _shares(sums: pd.DataFrame) -> pd.DataFrame:
    tot = sums.sum()
    return sums / tot.where(tot > 0)


def over_run(clients: pd.DataFrame, group_of, samples, groups) -> dict:
    """{group: {clients, data, selected, weight, steps, ratio, never}} over the whole run.
    `clients`: clients.csv rows; `group_of[i]`, `samples[i]`: client i's group and training
    samples; `groups`: every group name in the fleet's order."""
    group_of = np.asarray(group_of, dtype=object)
    samples = np.asarray(samples, dtype=np.float64)
    n = pd.Series(1.0, index=range(len(group_of))).groupby(group_of).sum().reindex(groups, fill_value=0.0)
    data = pd.Series(samples).groupby(group_of).sum().reindex(groups, fill_value=0.0)
    ids = clients["client"].to_numpy(dtype=np.int64)          # (an empty frame's column holds objects)
    rows = _amounts(clients).groupby(group_of[ids]).sum().reindex(groups, fill_value=0.0)
    share = _shares(rows)
    picked = np.zeros(len(group_of), dtype=bool)
    picked[ids[clients["selected"].to_numpy(dtype=bool)]] = True
    never = pd.Series(~picked).groupby(group_of).mean().reindex(groups)
    out = {}
    for g in groups:
        c = n[g] / n.sum()
        out[g] = {"clients": float(c), "data": float(data[g] / data.sum()) if data.sum() else float("nan"),
                  **{m: float(share.loc[g, m]) for m in MEASURES},
                  "ratio": float(share.loc[g, "selected"] / c) if c else float("nan"),
                  "never": float(never[g])}
    return out


def per_round(clients: pd.DataFrame, group_of, groups) -> pd.DataFrame:
    """One row per (round, group): the group's share of that round's selected rows, weight
    and steps (NaN where the round had none)."""
    group_of = np.asarray(group_of, dtype=object)
    a = _amounts(clients)
    a["round"], a["group"] = clients["round"].to_numpy(), group_of[clients["client"].to_numpy(dtype=np.int64)]
    sums = a.groupby(["round", "group"])[list(MEASURES)].sum()
    full = pd.MultiIndex.from_product([sorted(a["round"].unique()), list(groups)], names=["round", "group"])
    sums = sums.reindex(full, fill_value=0.0)
    tot = sums.groupby(level="round").transform("sum")
    return (sums / tot.where(tot > 0)).reset_index()
