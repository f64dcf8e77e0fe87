"""Figures of who the model serves (docs/fairness.md), one colour per device group in every
one of them (`group_colours`):

- group_accuracy(study)      mean client accuracy of each device group against virtual time
                             (one panel per condition; mean over seeds, band: one sd)
- accuracy_cdf(study)        the per-client accuracy at the last evaluation: one CDF per run,
                             each client a dot in its group's colour
- participation_bars(study)  per condition, the groups' shares of the clients, the data, the
                             selections, the aggregated weight and the SGD steps (stacked to 1)
- selection_rounds(run)      the groups' shares of each round's selections (stacked)
- fairness(runs)             the first three side by side (`flemu plot fairness RUN...`)

Accuracies come from client_eval.csv, shares from clients.csv (analysis/fairness.py).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import fairness as FA
from .conditions import group_colours
from .load import Study, load
from .plots import _resample, plt, save, sns

MEASURE_LABELS = {"clients": "clients", "data": "data", "selected": "selections", "weight": "agg. weight",
                  "steps": "SGD steps"}
RUN_STYLES = ["-", "--", ":", "-."]
NO_EVAL = "no per-client evaluation in these runs\n(add an `evaluation:` block)"


def _study(x) -> Study:
    return x if isinstance(x, Study) else load(x)


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="#555")
    ax.set_xticks([])
    ax.set_yticks([])


def _legend(ax, colours, title="device group", outside=False) -> None:
    from matplotlib.lines import Line2D
    where = {"loc": "upper left", "bbox_to_anchor": (1.01, 1)} if outside else {"loc": "best"}
    ax.legend(handles=[Line2D([], [], color=c, lw=2.5, label=g) for g, c in colours.items()], title=title,
              fontsize=8, title_fontsize=8, **where)


def group_accuracy(study, axes=None, out=None):
    """Mean client accuracy per device group against virtual time, per condition."""
    study = _study(study)
    names = FA.groups(study)
    colours = group_colours(names)
    ga = FA.group_accuracy(study)
    conds = list(dict.fromkeys(ga["condition"])) if len(ga) else [""]
    fig = None
    if axes is None:
        fig, axes = plt.subplots(1, len(conds), figsize=(4.2 * len(conds) + 1, 3.6), squeeze=False, sharey=True)
        axes = axes[0]
    for ax, cond in zip(np.atleast_1d(axes), conds):
        if not len(ga):
            _note(ax, NO_EVAL)
            continue
        d = ga[ga["condition"] == cond]
        top = float(d["virtual_time"].max())
        grid = np.linspace(0, top, 200)
        for g in names:
            curves = [_resample(e, "acc", "virtual_time", grid, float(e["virtual_time"].max()))
                      for _, e in d[d["group"] == g].groupby(["run", "model"])]
            if not curves:
                continue
            v = np.vstack(curves)
            mean = np.nanmean(v, axis=0)
            ax.plot(grid, mean, color=colours[g], lw=1.8)
            if len(curves) > 1:
                sd = np.nanstd(v, axis=0, ddof=1)
                ax.fill_between(grid, mean - sd, mean + sd, color=colours[g], alpha=0.2, lw=0)
        ax.set_title(str(cond), fontsize=9)
        ax.set_xlabel("virtual time (s)")
        ax.set_ylim(0, 1)
        _legend(ax, colours)
    np.atleast_1d(axes)[0].set_ylabel("mean client accuracy of the group")
    if fig is not None:
        fig.suptitle("accuracy per device group (each client on its own test rows)", fontsize=10)
        fig.tight_layout()
        save(fig, out)
    return fig


def accuracy_cdf(study, ax=None, out=None):
    """Per run, the empirical CDF of the clients' accuracy at its last evaluation; each client
    a dot in its device group's colour."""
    study = _study(study)
    colours = group_colours(FA.groups(study))
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.4, 3.8))
    ce = study.client_eval
    if not len(ce):
        _note(ax, NO_EVAL)
    else:
        keys = ["run", "model"] if "model" in ce else ["run"]
        low = 1.0
        for i, (key, e) in enumerate(ce.groupby(keys, sort=False)):
            last = e[e["evaluation"] == e["evaluation"].max()].sort_values("acc")
            y = np.arange(1, len(last) + 1) / len(last)
            label = " · ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
            ax.step(np.r_[last["acc"].iloc[0], last["acc"]], np.r_[0, y], where="post", color="#444",
                    ls=RUN_STYLES[i % 4], lw=1.2, label=label)
            ax.scatter(last["acc"], y, s=14, zorder=3, c=[colours.get(str(g), "#999") for g in last["group"]])
            low = min(low, float(last["acc"].min()))
        runs = ax.legend(title="run", fontsize=7, title_fontsize=8, loc="upper left")
        _legend(ax, colours, outside=True)
        ax.add_artist(runs)
        ax.set_xlim(max(0.0, low - 0.05), 1.0 + 0.01)           # the clients' range: a spread of a few % shows
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("client accuracy at the last evaluation")
        ax.set_ylabel("share of clients at or below")
    ax.set_title("per-client accuracy (dots: device group colours)", fontsize=9)
    if fig is not None:
        fig.tight_layout()
        save(fig, out)
    return fig


def participation_bars(study, ax=None, out=None):
    """Per condition, stacked bars of each group's share of clients, data, selections,
    aggregated weight and SGD steps (mean over seeds)."""
    study = _study(study)
    names = FA.groups(study)
    colours = group_colours(names)
    rows = []
    for rid, run in study.runs.items():
        shares, _ = FA.participation(run)
        cond = study.summary.set_index("run").loc[rid, "condition"]
        rows += [{"condition": cond, "group": g, "measure": m, "share": s[m]} for g, s in shares.items()
                 for m in MEASURE_LABELS]
    df = pd.DataFrame(rows)
    fig = None
    if ax is None:
        conds = df["condition"].nunique() if len(df) else 1
        fig, ax = plt.subplots(figsize=(max(5.5, 0.55 * 5 * conds + 2.5), 3.8))
    if not len(df):
        _note(ax, "no clients.csv rows")
        return fig
    mean = df.groupby(["condition", "measure", "group"], sort=False)["share"].mean()
    conds = list(dict.fromkeys(df["condition"]))
    width = 0.8 / len(conds)
    for j, cond in enumerate(conds):
        x = np.arange(len(MEASURE_LABELS)) + (j - (len(conds) - 1) / 2) * width
        bottom = np.zeros(len(MEASURE_LABELS))
        for g in names:
            v = np.array([mean.get((cond, m, g), 0.0) for m in MEASURE_LABELS], dtype=float)
            v = np.nan_to_num(v)
            ax.bar(x, v, width * 0.92, bottom=bottom, color=colours[g], edgecolor="white", lw=0.5)
            bottom += v
        if len(conds) > 1:
            for xi in x:
                ax.text(xi, 1.01, str(j + 1), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(MEASURE_LABELS)))
    ax.set_xticklabels(list(MEASURE_LABELS.values()), fontsize=8)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("share (stacked over groups)")
    title = "who took part" + ("" if len(conds) == 1 else ": " + ", ".join(f"{j + 1} = {c}" for j, c in enumerate(conds)))
    ax.set_title(title, fontsize=9, wrap=True)
    _legend(ax, colours, outside=True)
    if fig is not None:
        fig.tight_layout()
        save(fig, out)
    return fig


def selection_rounds(run_dir, out=None, title=None):
    """One run: each group's share of every round's selected clients (stacked to 1)."""
    from .load import load_run
    run = load_run(run_dir)
    _, per = FA.participation(run)
    names = (FA.run_groups(run) or sorted(per["group"].unique())) if len(per) else []
    colours = group_colours(names)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    if not len(per):
        _note(ax, "no clients.csv rows")
    else:
        wide = per.pivot(index="round", columns="group", values="selected").reindex(columns=names).fillna(0.0)
        ax.stackplot(wide.index, [wide[g] for g in names], colors=[colours[g] for g in names], step="mid")
        ax.set_xlabel("round")
        ax.set_ylabel("share of the round's selections")
        ax.set_ylim(0, 1)
        _legend(ax, colours, outside=True)
    ax.set_title(title or f"selections per round by device group: {run.name}", fontsize=9)
    fig.tight_layout()
    save(fig, out)
    return fig


def fairness(runs, out=None):
    """`flemu plot fairness`: accuracy per device group against virtual time (every run), the
    per-client accuracy CDFs, and the groups' participation shares, side by side."""
    study = _study(runs)
    sns.set_theme(style="whitegrid")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    ga = FA.group_accuracy(study)
    colours = group_colours(FA.groups(study))
    ax = axes[0]
    if not len(ga):
        _note(ax, NO_EVAL)
    else:
        for i, (run, d) in enumerate(ga.groupby("run", sort=False)):
            for (g, _), e in d.groupby(["group", "model"], sort=False):
                ax.plot(e["virtual_time"], e["acc"], color=colours.get(g), ls=RUN_STYLES[i % 4], lw=1.5,
                        marker="." if len(e) < 40 else None, label=f"{run}: {g}")
        ax.set_xlabel("virtual time (s)")
        ax.set_ylabel("mean client accuracy of the group")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, loc="lower right")
    ax.set_title("accuracy per device group (line style: run)", fontsize=9)
    accuracy_cdf(study, ax=axes[1])
    participation_bars(study, ax=axes[2])
    fig.tight_layout()
    save(fig, out)
    return fig


def report_section(study, fig_dir, cmp, keys) -> tuple:
    """The report's "Who the model serves" section: (sentences, per-group table, figures as
    [(title, png path or None, caption)]), one colour per device group in every figure."""
    names = FA.groups(study)
    text = [f"Device groups: {', '.join(names)} (the same colour in every figure of this section). Shares come "
            "from clients.csv (every selection, aggregation weight and SGD step of the run); accuracies from "
            "client_eval.csv (each client evaluated on its own local test rows; definitions in docs/fairness.md)."]
    if not len(study.client_eval):
        text.append("These runs have no per-client evaluation: add an `evaluation:` block to the scenario to see "
                    "each group's accuracy.")
    figs = []

    def add(name, title, caption, fn):
        try:
            fig = fn(fig_dir / name)
        except (ValueError, KeyError) as e:
            figs.append((title, None, f"not drawn: {e}"))
            return
        plt.close(fig)
        figs.append((title, fig_dir / f"{name}.png", caption))
    if len(study.client_eval):
        add("group_accuracy", "Accuracy per device group against virtual time",
            "The mean accuracy of each group's clients, each on its own test rows; mean over seeds, band = one sd.",
            lambda o: group_accuracy(study, out=o))
        add("client_accuracy_cdf", "Per-client accuracy at the end",
            "One CDF per run of the clients' accuracy at the last evaluation; each dot a client in its group's colour.",
            lambda o: accuracy_cdf(study, out=o))
    if len(study.clients):
        add("group_participation", "Who took part",
            "Each group's share of the clients and the data beside its share of the selections, the aggregated "
            "weight and the SGD steps (mean over seeds): a bar taller than the clients' bar is over-represented.",
            lambda o: participation_bars(study, out=o))
        s = study.summary[study.summary["run"].isin(list(study.runs))].drop_duplicates(subset=["condition"]).head(4)
        for _, r in s.iterrows():
            add(f"group_selections_{len(figs)}", f"Selections per round by device group: {r['condition']}",
                f"Seed {r['seed']}: each group's share of every round's selected clients.",
                lambda o, d=r["dir"], t=r["condition"]: selection_rounds(d, o, title=f"selections per round: {t}"))
    table = FA.group_table(cmp, keys, names) if len(cmp) else pd.DataFrame()
    return text, table, figs
