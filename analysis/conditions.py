"""How a study's conditions are drawn in every comparison figure: one colour per condition
(the hue label `plots.roles` / `plots._series` give each run), built once per report and
passed to every figure, and which runs count merges rather than rounds.

    pal = conditions.palette(study)              # {hue label: colour}, in the study's order
    conditions.merge_runs(study)                  # runs whose `round` is a merge (async)
    conditions.group_colours(names)               # {device group: colour}, per-group figures

A protocol declares whether its clients.csv rows are per client job (`records_per_job`, the
asynchronous protocol): its metrics.csv `round` counts the server's merges, one per arrival,
not synchronous rounds; figures against rounds draw those runs on an axis of their own.
"""
from __future__ import annotations

import seaborn as sns

from emulator import registry


def colours(labels) -> dict:
    """{label: colour}: tab10 for up to ten labels, evenly spaced hues beyond."""
    labels = list(dict.fromkeys(labels))
    pal = sns.color_palette("tab10" if len(labels) <= 10 else "husl", max(1, len(labels)))
    return dict(zip(labels, [tuple(float(x) for x in c) for c in pal]))


def group_colours(names) -> dict:
    """One colour per device group, the same in every per-device-group figure of a study."""
    pal = sns.color_palette("colorblind" if len(names) <= 10 else "husl", max(1, len(names)))
    return dict(zip(names, pal))


def palette(study, hue=None, col=None) -> dict:
    """{hue label: colour} of every run of the study, in the order of the study's summary: the
    mapping every comparison figure of one report draws with."""
    from .plots import _series, roles
    hue, col = roles(study, hue, col)
    series = _series(study, hue, col)
    runs = [r for r in study.summary["run"] if r in series.index]
    return colours(series.loc[runs]) if runs else {}


def protocol_name(run):
    p = (run.config or {}).get("protocol") if run is not None else None
    return p.get("name") if isinstance(p, dict) else p


def counts_merges(run) -> bool:
    """Whether a run's rounds are merges: its protocol records per job (asynchronous)."""
    entry = registry.table("protocol").get(protocol_name(run) or "")
    return bool(entry is not None and entry.factory is not None and entry.factory.records_per_job)


def merge_runs(study) -> list:
    """The runs of the study whose metrics.csv `round` counts merges (asynchronous)."""
    return [rid for rid, run in study.runs.items() if counts_merges(run)]
