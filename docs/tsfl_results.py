"""README's T-SFL tables and the surviving-client figure (issue 15), from the sweep folders of
scenarios/papers/tsfl_{tables,selection,skew,sign,cap}.yaml:

    python docs/tsfl_results.py [RUNS_ROOT]     (default runs/papers)

prints the tables (highest test accuracy, %, mean ± std over seeds; mean per-interval
survivors |S| and weighted survivors) and writes docs/figures/tsfl_survivors.png: per setting,
how many DMS survivors keep a weight in each interval, fixed vs probe-estimated constants.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))            # analysis/, when run as `python docs/tsfl_results.py`
RULES = [("fedavg", "FedAvg"), ("fedprox", "FedProx (μ = 0.01)"), ("fedasync", "FedAsync (fn. 2, γ = 0.5)"),
         ("dms", "DMS, fixed constants (default)"), ("dms_est", "DMS, estimated constants"),
         ("dms_neg", "DMS, mirrored slope −s"), ("dms_est_cap2", "DMS, estimated constants, cap θ = 2")]
PAPER = {  # T-SFL Tables 2-3, MNIST rows (tsfl.md 7.1-7.2)
    "case1": {"fedavg": 96.41, "fedprox": 97.01, "fedasync": 96.17, "dms": 97.89},
    "case2": {"fedavg": 97.18, "fedprox": 97.58, "fedasync": 96.73, "dms": 98.20},
    "case3": {"fedavg": 98.67, "fedprox": 98.55, "fedasync": 92.97, "dms": 99.06},
    "2it": {"fedavg": 98.13, "fedprox": 99.14, "fedasync": 97.75, "dms": 99.57},
    "4it": {"fedavg": 97.11, "fedprox": 97.46, "fedasync": 96.58, "dms": 98.59},
}
GAINS = {  # tsfl.md 7.3: DMS minus FedAvg / FedProx / FedAsync, MNIST, percentage points
    "case1": (1.48, 0.88, 1.72), "case2": (1.02, 0.62, 1.47), "case3": (0.39, 0.51, 6.09),
    "2it": (1.44, 0.43, 1.82), "4it": (1.48, 1.13, 2.01)}
SETTINGS = [("case1", "Case 1"), ("case2", "Case 2"), ("case3", "Case 3"), ("2it", "2-iteration"),
            ("4it", "4-iteration"), ("case2_a1", "Case 2, Dirichlet(1.0)")]


def load(root: Path) -> pd.DataFrame:
    """One row per finished run: setting, variant, seed, best accuracy, and the per-interval
    weight records (from metrics.csv)."""
    frames = []
    for sweep, setting_of in (("tsfl_tables", lambda r: r["case"]),
                              ("tsfl_selection", lambda r: f"{int(r['protocol.min_iterations'])}it"),
                              ("tsfl_skew", lambda r: "case2_a1"),
                              ("tsfl_sign", lambda r: "case2"),
                              ("tsfl_cap", lambda r: "case2")):
        idx = root / sweep / "sweep.csv"
        if not idx.exists():
            continue
        df = pd.read_csv(idx)
        df = df[df["status"] == "complete"].copy()
        if df.empty:
            continue
        df["setting"] = df.apply(setting_of, axis=1)
        df["run_dir"] = [root / sweep / d for d in df["dir"]]
        frames.append(df[["setting", "variant", "seed", "best_test_acc", "run_dir"]])
    df = pd.concat(frames, ignore_index=True)
    rec = []
    for d in df["run_dir"]:
        m = pd.read_csv(d / "metrics.csv")
        m = m[m["round"] > 0]
        row = {"n_cand": m["n_candidates"].mean()}
        if "weighted" in m:
            row.update(surv=m["survivors"].mean(), weighted=m["weighted"].mean(),
                       all_weighted=float((m["weighted"] == m["survivors"]).mean()),
                       max_weight=m["max_weight"].mean(), slope_n_first=m["slope_n"].dropna().iloc[0],
                       slope_n_last=m["slope_n"].dropna().iloc[-1])
        rec.append(row)
    return pd.concat([df, pd.DataFrame(rec)], axis=1)


def pm(x: pd.Series) -> str:
    return f"{100 * x.mean():.2f} ± {100 * x.std(ddof=1):.2f}" if len(x) > 1 else f"{100 * x.mean():.2f}"


def tables(df: pd.DataFrame) -> str:
    out = []
    present = [s for s, _ in SETTINGS if s in set(df["setting"])]
    names = dict(SETTINGS)
    out.append("| rule | " + " | ".join(names[s] for s in present) + " |")
    out.append("|---|" + "---|" * len(present))
    for v, label in RULES:
        cells = []
        for s in present:
            g = df[(df["setting"] == s) & (df["variant"] == v)]
            if g.empty:
                cells.append("—")
                continue
            c = pm(g["best_test_acc"]) + f" (n={len(g)})"
            if s in PAPER and v in PAPER[s]:
                c += f" [{PAPER[s][v]:.2f}]"
            cells.append(c)
        if any(c != "—" for c in cells):
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("Paired gains (pp, same seed: same partition, initial model and tau), DMS with fixed constants minus "
               "each rule, mean ± std over seeds [paper's MNIST gain]:")
    out.append("")
    out.append("| setting | vs FedAvg | vs FedProx | vs FedAsync | DMS estimated vs FedAvg |")
    out.append("|---|---|---|---|---|")
    best = df.set_index(["setting", "variant", "seed"])["best_test_acc"].sort_index()
    for s in present:
        cells = []
        for k, (a, b) in enumerate((("dms", "fedavg"), ("dms", "fedprox"), ("dms", "fedasync"), ("dms_est", "fedavg"))):
            try:
                d = (best.loc[s, a] - best.loc[s, b]).dropna()
            except KeyError:
                cells.append("—")
                continue
            c = f"{100 * d.mean():+.2f} ± {100 * d.std(ddof=1):.2f}" if len(d) > 1 else "—"
            if k < 3 and s in GAINS:
                c += f" [+{GAINS[s][k]:.2f}]"
            cells.append(c)
        out.append(f"| {names[s]} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("DMS weight records, mean per interval over runs: survivors |S| / weighted survivors / "
               "share of intervals with every survivor weighted / largest weight / s·n_U first → last interval")
    out.append("")
    out.append("| setting | rule | uploaders | survivors | weighted | all weighted | max weight | s·n_U |")
    out.append("|---|---|---|---|---|---|---|---|")
    for s in present:
        for v in ("dms", "dms_est", "dms_neg", "dms_est_cap2"):
            g = df[(df["setting"] == s) & (df["variant"] == v)]
            if g.empty or "weighted" not in g or g["weighted"].isna().all():
                continue
            out.append(f"| {names[s]} | {v} | {g['n_cand'].mean():.1f} | {g['surv'].mean():.1f} | "
                       f"{g['weighted'].mean():.1f} | {100 * g['all_weighted'].mean():.0f} % | "
                       f"{g['max_weight'].mean():.3f} | {g['slope_n_first'].mean():.2f} → {g['slope_n_last'].mean():.2f} |")
    return "\n".join(out)


MAX_WIDTH_PX = 1280        # the figure fits a 1280-pixel window at the report's dpi
PANEL_COLUMNS = 3          # panels per row: six settings as a 3 x 2 grid


def _panel(ax, df: pd.DataFrame, s: str, name: str) -> None:
    """One setting: per DMS rule, the weighted survivors (mean over seeds, band: min-max) and
    the survivors |S| (dotted) per interval."""
    for v, color, label in (("dms", "tab:blue", "fixed constants"), ("dms_est", "tab:red", "estimated constants"),
                            ("dms_est_cap2", "tab:green", "estimated, cap θ = 2")):
        g = df[(df["setting"] == s) & (df["variant"] == v)]
        if g.empty:
            continue
        ws, ss = [], []
        for d in g["run_dir"]:
            m = pd.read_csv(d / "metrics.csv")
            m = m[m["round"] > 0]
            ws.append(m["weighted"].to_numpy(float))
            ss.append(m["survivors"].to_numpy(float))
        W, S = np.vstack(ws), np.vstack(ss)
        x = np.arange(1, W.shape[1] + 1)
        ax.plot(x, W.mean(0), color=color, label=f"{label}: weighted")
        ax.fill_between(x, W.min(0), W.max(0), color=color, alpha=0.15, lw=0)
        ax.plot(x, S.mean(0), color=color, ls=":", lw=1, label=f"{label}: survivors |S|")
    ax.set_title(name, fontsize=10)
    ax.set_xlabel("interval")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def figure(df: pd.DataFrame, path: Path):
    """The survivors figure: one panel per setting, wrapped into rows of PANEL_COLUMNS so that
    it is at most MAX_WIDTH_PX wide (at analysis.plots.DPI) and readable at that size."""
    import math

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.plots import DPI
    present = [(s, n) for s, n in SETTINGS if not df[(df["setting"] == s) & df["variant"].isin(["dms", "dms_est"])].empty]
    cols = min(PANEL_COLUMNS, len(present))
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(min(3.5 * cols, MAX_WIDTH_PX / DPI - 0.1), 2.9 * rows + 0.9),
                             sharey=False, squeeze=False)
    for ax, (s, name) in zip(axes.flat, present):
        _panel(ax, df, s, name)
    for ax in axes.flat[len(present):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("clients per interval")
    handles = {}
    for ax in axes.flat:                                   # the union of the panels' entries
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("DMS: survivors that keep a weight (mean over seeds, band = min-max)", fontsize=10)
    fig.tight_layout(rect=(0, 0.55 / fig.get_figheight(), 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return fig


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "runs" / "papers"
    df = load(root)
    print(tables(df))
    figure(df, ROOT / "docs" / "figures" / "tsfl_survivors.png")


if __name__ == "__main__":
    main()
