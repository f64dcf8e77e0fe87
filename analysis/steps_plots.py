"""Local steps per client (the selected clients' rows of clients.csv; T-SFL: the iterations tau).

- one run: a box per client, coloured by device group (`conditions.group_colours`, the colours
  of the report's per-device-group figures)
- several runs: per condition, each client's mean steps per selected round (mean over seeds,
  error bar: one standard deviation over seeds) as markers in the condition's colour
  (`conditions.palette`, the same as every other comparison figure); client ids are
  categories, so no line joins them
- no client's steps varied: a sentence, not a flat line
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import conditions as C
from .plots import _series, _study, _wrap, plt, roles, save, sns


def local_steps(study, run=None, hue=None, col=None, out=None, palette=None):
    """Local steps per client per round (see the module). `palette`: {hue label: colour} (default
    `conditions.palette(study)`). Returns the Figure."""
    study = _study(study)
    c = study.clients
    if c.empty:
        raise ValueError("no clients.csv rows in this study")
    c = c[c["selected"].astype(bool)]
    sns.set_theme(style="whitegrid")
    fixed = c.groupby("condition")["steps"].unique() if len(c) else pd.Series(dtype=object)
    if len(fixed) and all(len(v) == 1 for v in fixed):
        return _fixed_steps(fixed.map(lambda v: int(v[0])), out)
    if run is not None or len(study.runs) == 1:
        return _one_run(c, run if run is not None else next(iter(study.runs)), out)
    hue, col = roles(study, hue, col)
    palette = palette if palette is not None else C.palette(study, hue, col)
    series = _series(study, hue, col)
    per = c.groupby(["run", "client"], as_index=False)["steps"].mean()
    per["_hue"] = per["run"].map(series)
    per["_col"] = per["run"].map(study.summary.set_index("run")[col]) if col else ""
    stats = per.groupby(["_col", "_hue", "client"], sort=False)["steps"].agg(["mean", "std"]).reset_index()
    once = c.assign(_h=c["run"].map(series)).groupby("_h")["steps"].unique()
    names = {h: f"{h} (every client ran {int(v[0])} steps)" for h, v in once.items() if len(v) == 1}
    return _per_condition(stats, palette, names, col, out)


def _one_run(c, rid, out):
    d = c[c["run"] == rid]
    groups = list(dict.fromkeys(d["group"])) if "group" in d else []
    fig, ax = plt.subplots(figsize=(min(14, 3 + 0.3 * d["client"].nunique()), 4))
    sns.boxplot(data=d, x="client", y="steps", hue="group" if groups else None, ax=ax, dodge=False,
                fliersize=2, linewidth=0.8, palette=C.group_colours(groups) if groups else None)
    ax.set_title(f"local steps per round: {rid}", fontsize=10)
    ax.set_xlabel("client")
    ax.set_ylabel("local steps per round")
    if ax.get_legend() is not None:
        ax.legend(title="group", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    save(fig, out)
    return fig


def _per_condition(stats: pd.DataFrame, palette: dict, names: dict, col, out):
    """One panel per `_col` value; per hue, each client's mean as a marker with a sd bar."""
    panels = list(dict.fromkeys(stats["_col"]))
    present = list(dict.fromkeys(stats["_hue"]))
    hues = [h for h in palette if h in present] + [h for h in present if h not in palette]   # the report's order
    colours = {**C.colours(hues), **{h: palette[h] for h in hues if h in palette}}
    ncol = _wrap(len(panels)) if col else 1
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.3 * ncol, 3.2 * nrow + 0.4), squeeze=False, sharey=True)
    width = 0.8 / max(1, len(hues))
    for ax, panel in zip(axes.flat, panels):
        d = stats[stats["_col"] == panel]
        for j, h in enumerate(hues):
            e = d[d["_hue"] == h]
            x = e["client"].to_numpy(float) + (j - (len(hues) - 1) / 2) * width
            ax.errorbar(x, e["mean"], yerr=np.nan_to_num(e["std"].to_numpy(float)), fmt="o", ms=3.5, lw=0.8,
                        capsize=1.5, linestyle="none", color=colours[h])
        ax.set_xlabel("client")
        if col:
            ax.set_title(f"{col.split('.')[-1]} = {panel}", fontsize=9)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("mean local steps per round")
    from matplotlib.lines import Line2D
    fig.legend(handles=[Line2D([], [], color=colours[h], marker="o", ls="none", label=names.get(h, h)) for h in hues],
               loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8)
    fig.suptitle("local steps per client (selected rounds; mean over seeds, bar: one sd)", y=1.0)
    fig.tight_layout()
    save(fig, out)
    return fig


def _fixed_steps(steps: pd.Series, out=None):
    """The local-steps figure when no client's steps varied: a sentence, not a flat line.
    `steps`: condition -> the steps every selected client ran."""
    values = sorted(set(steps))
    if len(values) == 1:
        text = f"every client ran {values[0]} local steps in every round it was selected"
    else:
        text = "every client ran a fixed number of local steps per round:\n" + "\n".join(
            f"{cond}: {e}" for cond, e in steps.items())
    fig, ax = plt.subplots(figsize=(7, 1.0 + 0.25 * text.count("\n")))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11, transform=ax.transAxes)
    ax.set_title("local steps per client", fontsize=10)
    save(fig, out)
    return fig
