"""Who the model serves: the spread of per-client accuracy (docs/fairness.md).

One definition, used by the run (metrics.csv columns, from the rows it writes to
client_eval.csv) and by `analysis` (recomputing them from client_eval.csv). For the
accuracies a_1..a_n of the n clients of one evaluation, with n_i local test rows each:

- client_acc_mean     (1/n) sum_i a_i                      (each client counts once)
- client_acc_wmean    sum_i n_i a_i / sum_i n_i            (each test row counts once)
- client_acc_std      sqrt((1/n) sum_i (a_i - mean)^2)     (population standard deviation)
- client_acc_worst10  mean of the ceil(n/10) lowest a_i
- client_acc_best10   mean of the ceil(n/10) highest a_i
- client_acc_jain     (sum_i a_i)^2 / (n sum_i a_i^2)      (Jain's index, in [1/n, 1]; 1 when all a_i = 0)
- acc_group_<name>    the mean a_i over the clients of device group <name> (NaN: none evaluated)
"""
from __future__ import annotations

import math

import numpy as np

NAN = float("nan")
SPREAD = ("client_acc_mean", "client_acc_wmean", "client_acc_std", "client_acc_worst10", "client_acc_best10",
          "client_acc_jain")


def jain(x) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2); 1 when every x is 0, NaN for no x."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return NAN
    sq = float(np.dot(x, x))
    return 1.0 if sq == 0 else float(x.sum() ** 2 / (len(x) * sq))


def tail_mean(x, lowest: bool = True) -> float:
    """Mean of the ceil(n/10) lowest (or highest) values; NaN for no value."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    if not len(x):
        return NAN
    m = math.ceil(0.1 * len(x))
    return float(x[:m].mean() if lowest else x[-m:].mean())


def group_column(name: str) -> str:
    return f"acc_group_{name}"


def client_columns(acc, n, groups, group_names) -> dict:
    """The metrics columns of one evaluation: `acc`, `n` per evaluated client, `groups` each
    client's device-group name, `group_names` every group of the fleet (in order)."""
    acc = np.asarray(acc, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    groups = np.asarray(groups, dtype=object)
    if len(acc):
        out = {"client_acc_mean": float(acc.mean()), "client_acc_wmean": float(np.dot(acc, n) / n.sum()),
               "client_acc_std": float(acc.std()), "client_acc_worst10": tail_mean(acc, True),
               "client_acc_best10": tail_mean(acc, False), "client_acc_jain": jain(acc)}
    else:
        out = dict.fromkeys(SPREAD, NAN)
    for g in group_names:
        mine = acc[groups == g]
        out[group_column(g)] = float(mine.mean()) if len(mine) else NAN
    return out
