"""The report's glossary: a definition of every column header of every table the report shows
(the scenario differences, the comparison, who the model serves, the runs left out, every
run), and of the metrics behind them (analysis/metrics.py, docs/fairness.md).

    glossary.entries([table, runs, ...], axes=study.axes, paths=differing_paths)
    -> [(header, definition)] in the order the headers first appear

A header is a fixed column (`COLUMNS`), a swept axis (its full path or the short form a
table titles it by) or a scenario path of the differences table.
"""
from __future__ import annotations

COLUMNS = {
    "condition": "one combination of the swept values (every seed of it); the runs' directory names when nothing was swept",
    "run": "one run directory (a condition with one seed)",
    "seed": "the run's seed: the data partition, the initial model, the device draws and the selections follow from it",
    "status": "how the run ended: complete, stopped (reached its target or a callback stopped it), diverged, stalled, "
              "or left out of the tables: failed, crashed, invalid, empty (no aggregation weighed any client)",
    "error": "why the run was left out (its summary.json)",
    "model": "the model of a multi-model run (every table row is one model)",
    "runs": "runs of the condition (its seeds); the ± columns are mean ± one standard deviation over them",
    "failed": "runs of the condition left out of the figures and metrics (see Runs left out)",
    "reached": "runs of the condition whose test accuracy reached the target accuracy",
    "time to target (s)": "virtual seconds until the first evaluation at or above the target accuracy (mean over the "
                          "seeds that reached it; `reached` counts them)",
    "rounds to target": "aggregations (rounds; merges under an asynchronous protocol) until the first evaluation at or "
                        "above the target accuracy",
    "acc. at budget": "the last evaluated test accuracy at or before the time budget",
    "final acc.": "test accuracy of the global model at the run's last evaluation",
    "AUC (mean acc.)": "area under the accuracy-vs-virtual-time step curve divided by the horizon (the same for every "
                       "run): the time-averaged test accuracy",
    "AUC": "area under the accuracy-vs-virtual-time step curve divided by the horizon: the time-averaged test accuracy",
    "straggler share": "share of the round time spent after the median selected client had finished, waiting on the "
                       "slowest (0 for asynchronous and T-SFL interval protocols, whose server never waits)",
    "round time (s)": "mean virtual seconds per aggregation; the latency figure splits it into compute, communication "
                      "and waiting (mean over the selected clients)",
    "particip. CV": "coefficient of variation over clients of the share of aggregations each client was in "
                    "(0: every client equally often)",
    "tau avg": "mean staleness of the fleet (FedSUM's delay metric): per aggregation t, t minus the oldest round in "
               "which any client was last aggregated, averaged over aggregations; 0 when every client is in every "
               "aggregation",
    "delta": "heterogeneity degree of the local work (T-SFL): the population variance over clients of the local "
             "iterations tau (steps) in an aggregation, averaged over aggregations; 0 when every client ran as many",
    "wall (s)": "real (wall-clock) seconds the run took on this machine, not virtual time",
    "group": "a device group of the fleet (clients.groups[].name)",
    "clients": "the group's share of the fleet's clients",
    "data": "the group's share of the training data (partition.csv)",
    "selected": "the group's share of the selected clients' rows (clients.csv)",
    "weight": "the group's share of the aggregation weight (clients.csv weight > 0)",
    "steps": "the group's share of the local SGD steps (clients.csv)",
    "accuracy": "the mean accuracy of the group's clients at the last evaluation, each on its own local test rows "
                "(client_eval.csv)",
}


def _axis_names(axes) -> dict:
    """{header: axis path} for every form a table titles a swept axis by."""
    out = {}
    for a in axes:
        parts = a.split(".")
        short = ".".join(parts[-2:]) if parts[-1] in ("name", "model", "mode") and len(parts) > 1 else parts[-1]
        for h in (a, short, parts[-1]):
            out.setdefault(h, a)
    return out


def define(header: str, axes=(), paths=()) -> str:
    """The definition of one column header ("" where there is none: a report is still written)."""
    names = _axis_names(axes)
    if header in names:
        a = names[header]
        return f"the swept value of `{a}`" + (" (the sweep's named variants)" if a == "variant" else "")
    if header in paths:
        return (f"`{header}` of the condition's resolved config.yaml (a component: its name, then in brackets "
                "its settings that differ between conditions; -: not set)")
    return COLUMNS.get(header, "")


def entries(tables, axes=(), paths=()) -> list:
    """[(header, definition)] of every column header of `tables` (DataFrames), each once, in
    order of first appearance."""
    headers = list(dict.fromkeys(str(c) for t in tables if t is not None for c in t.columns))
    return [(h, define(h, axes, paths)) for h in headers]
