"""Figures from run directories and sweeps (seaborn / matplotlib; PNG and SVG).

Every function returns the matplotlib Figure and writes it when given `out` (see `save`).
For a Study, `hue` (one line or bar colour per value) and `col` (one panel per value) name
swept columns; by default a sweep's `report:` hints, else `variant` as hue and the first
other swept column as panels. Curves over several seeds are drawn as their mean with a
band of one standard deviation; runs are resampled on a common time (or round) grid, each
evaluation holding until the next, as the model the fleet had at that moment.

- accuracy_vs_time(run_dirs, out, x, y)   one line per run (what `flemu plot` draws)
- curves(study, y, x)                      accuracy / loss vs virtual time or rounds, band over seeds
- target_bars(study, target)               virtual time to the target accuracy per condition
- participation_raster(run_dir, out)       clients x rounds: offline / available / aggregated / dropped
- participation_states(study)              every condition: each client's share of rounds per state
- local_steps(study)                       distribution of local steps per client
- latency_breakdown(study)                 round time split into compute, communication, waiting

The last three live in participation_plots.py and steps_plots.py. Every comparison figure
draws a condition in one colour: `palette=` (a {hue label: colour} mapping, built once per
report by `conditions.palette`), by default the study's own.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from emulator.runs import outputs  # noqa: E402

from . import conditions as C  # noqa: E402

from .load import Study, load, load_run  # noqa: E402

DPI = 120                            # every figure's resolution: a 10.6-inch figure is 1280 px wide
LABELS = {"virtual_time": "virtual time (s)", "round": "round", "test_acc": "test accuracy",
          "test_loss": "test loss", "train_loss": "training loss", "wall_time": "wall-clock time (s)"}


def label(col: str) -> str:
    return LABELS.get(col, col)


def save(fig, out, formats=None) -> list:
    """Write `fig` to `out`: with a suffix (.png / .svg / .pdf) that format only, without one
    every format of `formats` (default PNG and SVG), each signed as flemu's (its metadata), so
    that a later save may replace it; a file flemu did not write is never replaced
    (`emulator.runs.outputs.OutputError`). Returns the paths written."""
    if out is None:
        return []
    paths = targets(out, formats)
    for p in paths:                    # every file is flemu's to replace before one is written
        outputs.check_file_target(p, "figure")
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    for p in paths:
        fig.savefig(p, dpi=DPI, bbox_inches="tight", metadata=outputs.plot_metadata(p.suffix))
    return paths


def targets(out, formats=None) -> list:
    """The files `save(fig, out, formats)` writes."""
    out = Path(out)
    if out.suffix.lower() in (".png", ".svg", ".pdf"):
        return [out]
    return [out.with_name(f"{out.name}.{f}") for f in (formats or ("png", "svg"))]


def _wrap(n: int) -> int:
    """Panels per row: 4 panels as 2 x 2, else up to 3 a row."""
    return 2 if n == 4 else min(3, n)


def _study(x) -> Study:
    return x if isinstance(x, Study) else load(x)


def roles(study: Study, hue=None, col=None):
    """(hue column, col column) for a study: arguments, else the sweep's report hints, else
    `variant` / the last swept column as hue and the first other as panels."""
    hint = (study.meta.get("report") or {}) if study.meta else {}
    axes = [a for a in study.axes if study.summary[a].nunique(dropna=False) > 1] if study.axes else []
    hue = hue or hint.get("hue")
    col = col or hint.get("col")
    if hue is None:
        hue = "variant" if "variant" in axes else (axes[-1] if axes else "condition")
    if col is None:
        rest = [a for a in axes if a != hue]
        col = rest[0] if rest and study.summary[rest[0]].nunique() <= 8 else None
    if col == hue:
        col = None
    return hue, col


def _series(study: Study, hue, col) -> pd.Series:
    """Per run: the label of every swept value not shown by `col` (the hue of a plot), so that
    sweeps with more than two axes still draw one line per condition."""
    s = study.summary.set_index("run")
    others = [a for a in study.axes if a not in (col,) and a in s and s[a].nunique(dropna=False) > 1]
    if hue not in others and hue in s:
        return s[hue].astype(str)
    if not others:
        return s["condition"].astype(str) if hue == "condition" else s[hue].astype(str)
    order = [hue] + [a for a in others if a != hue] if hue in others else others
    return s[order].astype(str).agg(" · ".join, axis=1)


def _resample(m: pd.DataFrame, y: str, x: str, grid: np.ndarray, end: float) -> np.ndarray:
    e = m.dropna(subset=[y]).sort_values(x)
    if e.empty:
        return np.full(len(grid), np.nan)
    xs, ys = e[x].to_numpy(float), e[y].to_numpy(float)
    i = np.searchsorted(xs, grid + 1e-9, side="right") - 1
    v = np.where(i >= 0, ys[np.clip(i, 0, None)], np.nan)
    v[grid > end + 1e-9] = np.nan
    return v


def curve_frame(study: Study, y="test_acc", x="virtual_time", points: int = 200, hue=None, col=None,
                runs=None) -> pd.DataFrame:
    """Every run's step curve on one grid: columns run, <hue>, <col>, seed, x, y. `runs`: only
    these runs (default every run)."""
    hue, col = roles(study, hue, col)
    series = _series(study, hue, col)
    m = study.metrics if runs is None or study.metrics.empty else study.metrics[study.metrics["run"].isin(list(runs))]
    multi = "model" in m and m["model"].nunique() > 1      # a hue per model, not model 0 alone
    if m.empty or y not in m:
        return pd.DataFrame(columns=["run", hue, x, y])
    ends = m.groupby("run")[x].max()
    top = float(ends.max())
    grid = np.unique(np.round(np.linspace(0, top, min(points, int(top) + 1)))) if x == "round" \
        else np.linspace(0, top, points)
    frames = []
    for (run, model), g in m.groupby(["run", "model"] if multi else ["run", np.zeros(len(m), int)], sort=False):
        v = _resample(g, y, x, grid, float(ends[run]))
        name = series.get(run, run)
        f = pd.DataFrame({x: grid, y: v, "run": run, hue: f"{name} · model {model}" if multi else name})
        if multi:
            f["model"] = int(model)
        if col:
            f[col] = study.summary.set_index("run").loc[run, col]
        frames.append(f)
    return pd.concat(frames, ignore_index=True).dropna(subset=[y])


def hue_colours(levels, palette=None) -> dict:
    """{level: colour} for a figure's hue levels: the report's `palette` where it names the
    level, else colours of their own (`conditions.colours`)."""
    levels = list(dict.fromkeys(levels))
    return {**C.colours(levels), **{h: palette[h] for h in levels if palette and h in palette}}


def curves(study, y="test_acc", x="virtual_time", hue=None, col=None, target=None, out=None, points=200,
           palette=None, runs=None, xlabel=None):
    """`y` (test accuracy, test loss, ...) against virtual time or rounds: one line per hue
    value (mean over seeds, band = one standard deviation), one panel per `col` value.
    `palette`: {hue label: colour} (default `conditions.palette(study)`); `runs`: only these
    runs; `xlabel`: the x axis's title (default from `x`)."""
    study = _study(study)
    hue, col = roles(study, hue, col)
    palette = palette if palette is not None else C.palette(study, hue, col)
    df = curve_frame(study, y, x, points, hue, col, runs=runs)
    if runs is not None and df.empty:
        raise ValueError("none of these runs has evaluations")
    sns.set_theme(style="whitegrid")
    g = sns.relplot(data=df, x=x, y=y, hue=hue if len(df) else None, col=col, col_wrap=_wrap(df[col].nunique()) if col else None,
                    kind="line", errorbar="sd", height=3.2, aspect=1.35,
                    palette=hue_colours(df[hue], palette) if len(df) else None,
                    facet_kws={"sharex": True, "sharey": True})
    g.set_axis_labels(xlabel or label(x), label(y))
    if col:
        g.set_titles(f"{col.split('.')[-1]} = {{col_name}}")
    target = target if target is not None else (study.target if y == "test_acc" else None)
    for ax in g.axes.flat:
        if target and y == "test_acc":
            ax.axhline(target, ls="--", lw=1, color="grey")
    if g.legend is not None:
        g.legend.set_title(hue.split(".")[-1] if hue != "condition" else "")
    g.figure.suptitle(f"{label(y)} vs {xlabel or label(x)}" + (f" (target {target:g} dashed)" if target and y == "test_acc" else ""),
                      y=1.02)
    save(g.figure, out)
    return g.figure


ACCURACY_FORMATS = ("png",)          # `accuracy_vs_time` to a path without a suffix: PNG only


def run_labels(run_dirs) -> list:
    """A legend label per run directory: its name, or as many trailing path parts as make the
    labels distinct (`a/run` and `b/run` -> `a/run`, `b/run`). The scenario's `name` is not a
    label: three runs of one scenario share it."""
    parts = [Path(d).resolve().parts for d in run_dirs]
    for n in range(1, max((len(p) for p in parts), default=1) + 1):
        labels = ["/".join(p[-n:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(d) for d in run_dirs]


def accuracy_vs_time(run_dirs, out=None, x="virtual_time", y="test_acc"):
    """Test accuracy (or any metric `y`) against virtual time (or rounds) for one or more runs.
    Returns the matplotlib Figure; writes it to `out` when given."""
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for d, name in zip(run_dirs, run_labels(run_dirs)):
        r = load_run(d, clients=False)
        m = r.metrics.dropna(subset=[y]) if y in r.metrics else r.metrics.iloc[0:0]
        for model, g in m.groupby("model") if "model" in m else [(0, m)]:
            lab = name if m["model"].nunique() <= 1 else f"{name} (model {model})"
            sns.lineplot(data=g, x=x, y=y, ax=ax, label=lab, marker="." if len(g) < 60 else None)
    ax.set_xlabel({"virtual_time": "virtual time (s)", "round": "round"}.get(x, x))
    ax.set_ylabel({"test_acc": "test accuracy", "test_loss": "test loss"}.get(y, y))
    ax.set_title(f"{ax.get_ylabel()} vs {ax.get_xlabel()}")
    target = None
    if len(run_dirs) == 1:
        target = load_run(run_dirs[0], clients=False).config.get("run", {}).get("target_accuracy")
    if target and y == "test_acc":
        ax.axhline(target, ls="--", lw=1, color="grey", label=f"target {target:g}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    save(fig, out, formats=ACCURACY_FORMATS)
    return fig


def _grouped_positions(xs, hs):
    n = max(1, len(hs))
    width = 0.8 / n
    return {(xv, hv): i + (j - (n - 1) / 2) * width for i, xv in enumerate(xs) for j, hv in enumerate(hs)}, width


def target_bars(study, target=None, x=None, hue=None, per_run=None, out=None, palette=None):
    """Virtual time to reach the target accuracy, per condition: bars = mean over the seeds
    that reached it (error bar: one standard deviation, `k/n` when only k of n did); a
    hatched grey bar up to the longest run's time marks a condition where none did."""
    from .metrics import run_metrics
    study = _study(study)
    target = target if target is not None else study.target
    if target is None:
        raise ValueError("no target accuracy: give target= (or set run.target_accuracy)")
    hue_, col = roles(study, hue, None)
    x = x or col
    pr = per_run if per_run is not None else run_metrics(study, target=target)
    pr = pr[pr["status"].isin(["complete", "diverged", "stalled", "stopped"])].copy()
    series = _series(study, hue_, x)
    pr["_hue"] = pr["run"].map(series)
    if x is None:
        pr["_x"] = ""
    else:
        pr["_x"] = pr[x]
    xs = list(dict.fromkeys(sorted(pr["_x"].unique(), key=lambda v: (isinstance(v, str), v)))) if len(pr) else []
    hs = list(dict.fromkeys(pr["_hue"]))
    pos, width = _grouped_positions(xs, hs)
    colors = hue_colours(hs, palette if palette is not None else C.palette(study, hue_, x))
    horizon = float(pr["virtual_time"].max()) if len(pr) else 1.0
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(xs) * max(1, len(hs)) * 0.45 + 2), 4.2))
    labelled = set()
    for (xv, hv), g in pr.groupby(["_x", "_hue"], sort=False):
        p = pos[(xv, hv)]
        t = g["time_to_target"].dropna()
        lab = hv if hv not in labelled else None
        if len(t):
            ax.bar(p, t.mean(), width * 0.95, yerr=t.std(ddof=1) if len(t) > 1 else None, color=colors[hv],
                   label=lab, capsize=2)
            if len(t) < len(g):
                ax.text(p, t.mean(), f"{len(t)}/{len(g)}", ha="center", va="bottom", fontsize=7)
        else:
            ax.bar(p, horizon, width * 0.95, color="none", edgecolor=colors[hv], hatch="//", lw=0.8, label=lab)
            ax.text(p, horizon, "✕", ha="center", va="bottom", fontsize=9, color=colors[hv])
        labelled.add(hv)
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([str(v) for v in xs])
    ax.set_xlabel(x.split(".")[-1] if x else "")
    ax.set_ylabel(f"virtual time to {target:g} accuracy (s)")
    ax.set_title(f"time to target accuracy {target:g} (hatched ✕: not reached within {horizon:g} s)", fontsize=10)
    if hs:
        ax.legend(title=hue_.split(".")[-1] if hue_ != "condition" else None, fontsize=8, loc="upper left",
                  bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    save(fig, out)
    return fig


def latency_breakdown(study, per_run=None, out=None):
    """Mean round time per condition split into compute, communication and waiting (seconds
    per round, mean over the selected clients, then over rounds and seeds)."""
    from .metrics import run_metrics
    study = _study(study)
    pr = per_run if per_run is not None else run_metrics(study)
    pr = pr.dropna(subset=["compute_s"]) if "compute_s" in pr else pr.iloc[0:0]
    agg = pr.groupby("condition", sort=False)[["compute_s", "comm_s", "waiting_s"]].mean()
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.32 * max(1, len(agg))))
    left = np.zeros(len(agg))
    for k, lab, colr in (("compute_s", "compute", "#4c72b0"), ("comm_s", "communication", "#dd8452"),
                         ("waiting_s", "waiting", "#c7c7c7")):
        vals = agg[k].to_numpy() if k in agg else np.zeros(len(agg))
        ax.barh(range(len(agg)), vals, left=left, color=colr, label=lab, height=0.7)
        left += np.nan_to_num(vals)
    ax.set_yticks(range(len(agg)))
    ax.set_yticklabels(list(agg.index), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per round (mean over selected clients)")
    ax.set_ylabel("condition")
    ax.set_title("round latency: compute, communication, waiting", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save(fig, out)
    return fig


def times_vs_axis(study, x: str, target=None, hue=None, per_run=None, out=None, palette=None):
    """Two panels against a swept numeric axis `x` (e.g. T-SFL's heterogeneity a, delta =
    a^2): the virtual time the run took (its fixed number of aggregations or budget) and the
    virtual time to the target accuracy; one line per hue value (mean over seeds, sd band)."""
    from .metrics import run_metrics
    study = _study(study)
    target = target if target is not None else study.target
    hue_, _ = roles(study, hue, x)
    pr = per_run if per_run is not None else run_metrics(study, target=target)
    pr = pr[pr["status"].isin(["complete", "diverged", "stalled", "stopped"])].copy()
    pr["_hue"] = pr["run"].map(_series(study, hue_, x))
    pr[x] = pd.to_numeric(pr[x], errors="coerce")
    colours = hue_colours(pr["_hue"], palette if palette is not None else C.palette(study, hue_, x))
    sns.set_theme(style="whitegrid")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    panels = [("virtual_time", "virtual time of the run (s)")]
    if target is not None and "time_to_target" in pr:
        panels.append(("time_to_target", f"virtual time to {target:g} accuracy (s)"))
    for ax, (col, lab) in zip(axes, panels):
        sns.lineplot(data=pr, x=x, y=col, hue="_hue", marker="o", errorbar="sd", ax=ax, palette=colours)
        ax.set_xlabel(label(x))
        ax.set_ylabel(lab)
        if ax.get_legend() is not None:
            ax.get_legend().set_title(hue_.split(".")[-1] if hue_ != "condition" else "")
    if len(panels) == 1:
        axes[1].set_visible(False)
    fig.tight_layout()
    save(fig, out)
    return fig


# figures of their own modules, importable from here as before
from .participation_plots import (STATE_COLOURS, STATES, participation_matrix,  # noqa: E402,F401
                                  participation_raster, participation_states)
from .steps_plots import local_steps  # noqa: E402,F401
