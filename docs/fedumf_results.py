"""README's FedUMF results (issue 17), from the sweep folders of
scenarios/papers/fedumf_tables.yaml and fedumf_fleet_sweep.yaml:

    python docs/fedumf_results.py [RUNS_ROOT]     (default runs/papers)

prints the tables in the form of the paper's Tables 1-2 (rounds to each target accuracy,
FedAvg vs FedUMF alpha = 1, mean ± std over seeds, and their ratio) and writes
docs/figures/fedumf_alpha.png (test accuracy against rounds for FedAvg and alpha in
{0.1, 0.5, 1}, IID, the four (eta, C) settings) and docs/figures/fedumf_fleet.png (accuracy
against virtual time on the heterogeneous fleet).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGETS = [0.70, 0.75, 0.80, 0.85, 0.88]
VARIANTS = [("fedavg", "FedAvg"), ("fedumf_a01", "FedUMF α = 0.1"), ("fedumf_a05", "FedUMF α = 0.5"),
            ("fedumf_a1", "FedUMF α = 1")]


def first_round(m: pd.DataFrame, target: float) -> float:
    hit = m[(m["round"] >= 1) & (m["test_acc"] >= target)]
    return float(hit["round"].iloc[0]) if len(hit) else np.nan


def table(study) -> pd.DataFrame:
    s = study.summary.set_index("run")
    rows = []
    for run, m in study.metrics.groupby("run"):
        r = s.loc[run]
        row = {"data": r["data"], "lr": float(r["algorithm.lr"]), "k": int(r["protocol.select.k"]),
               "variant": r["variant"], "seed": int(r["seed"])}
        for t in TARGETS:
            row[t] = first_round(m, t)
        row["final"] = float(m.dropna(subset=["test_acc"])["test_acc"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows)


def cell(v: pd.Series) -> str:
    """mean ± std over the seeds that reached it; '*' when none, (k/n) when only some."""
    ok = v.dropna()
    if ok.empty:
        return "*"
    s = f"{ok.mean():.1f}" + (f" ± {ok.std(ddof=1):.1f}" if len(ok) > 1 else "")
    return s + ("" if len(ok) == len(v) else f" ({len(ok)}/{len(v)})")


def markdown(t: pd.DataFrame, data: str) -> str:
    lines = ["| η, C | scheme | " + " | ".join(f"{int(x * 100)} %" for x in TARGETS) + " | final acc. |",
             "|---|---|" + "---|" * (len(TARGETS) + 1)]
    for (lr, k), g in t[t["data"] == data].groupby(["lr", "k"]):
        avg, umf = g[g["variant"] == "fedavg"], g[g["variant"] == "fedumf_a1"]
        for name, part in (("FedAvg", avg), ("FedUMF", umf)):
            lines.append(f"| {lr:g}, {k / 100:g} | {name} | " + " | ".join(cell(part[x]) for x in TARGETS)
                         + f" | {part['final'].mean():.3f} ± {part['final'].std(ddof=1):.3f} |")
        ratio = [avg[x].mean() / umf[x].mean() if avg[x].notna().all() and umf[x].notna().all() else np.nan
                 for x in TARGETS]
        lines.append(f"| | ratio | " + " | ".join("–" if np.isnan(r) else f"{r:.2f}" for r in ratio) + " | |")
    return "\n".join(lines)


def alpha_figure(study, out: Path) -> None:
    import matplotlib.pyplot as plt
    s = study.summary.set_index("run")
    m = study.metrics.dropna(subset=["test_acc"])
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey=True)
    for ax, (lr, k) in zip(axes.flat, [(0.01, 10), (0.01, 50), (0.05, 10), (0.05, 50)]):
        for variant, label in VARIANTS:
            runs = s[(s["data"] == "iid") & (s["variant"] == variant) & (s["algorithm.lr"].astype(float) == lr)
                     & (s["protocol.select.k"].astype(int) == k)].index
            curves = m[m["run"].isin(runs)].pivot_table(index="round", columns="run", values="test_acc")
            if curves.empty:
                continue
            mean, sd = curves.mean(axis=1), curves.std(axis=1)
            ax.plot(mean.index, mean, label=label)
            ax.fill_between(mean.index, mean - sd, mean + sd, alpha=0.2)
        ax.set_title(f"IID, η = {lr:g}, C = {k / 100:g}")
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0.3, 0.92)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("FedUMF vs FedAvg on mnist5k (2NN, 100 clients; mean ± sd over 3 seeds)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def fleet_figure(study, out: Path) -> pd.DataFrame:
    import matplotlib.pyplot as plt
    s = study.summary.set_index("run")
    m = study.metrics.dropna(subset=["test_acc"])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    grid = np.linspace(0, float(m["virtual_time"].max()), 300)
    rows = []
    for variant, label in (("fedavg", "FedAvg"), ("fedumf", "FedUMF α = 1")):
        runs = s[s["variant"] == variant].index
        ys = []
        for run in runs:
            g = m[m["run"] == run].sort_values("virtual_time")
            i = np.searchsorted(g["virtual_time"].to_numpy(), grid, side="right") - 1
            ys.append(np.where(i >= 0, g["test_acc"].to_numpy()[np.clip(i, 0, None)], np.nan))
            rows.append({"variant": variant, "run": run, "final": float(g["test_acc"].iloc[-1]),
                         "time_to_0.85": float(g.loc[g["test_acc"] >= 0.85, "virtual_time"].min())
                         if (g["test_acc"] >= 0.85).any() else np.nan})
        ys = np.array(ys)
        ax.plot(grid, np.nanmean(ys, 0), label=label)
        ax.fill_between(grid, np.nanmean(ys, 0) - np.nanstd(ys, 0), np.nanmean(ys, 0) + np.nanstd(ys, 0), alpha=0.2)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title("Heterogeneous fleet: half slow devices, Markov on/off, 1 s deadline")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return pd.DataFrame(rows)


def main(root: Path) -> None:
    import analysis
    figs = ROOT / "docs" / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    study = analysis.load(root / "fedumf_tables", clients=False)
    t = table(study)
    for data, title in (("iid", "Table 1 (IID)"), ("noniid", "Table 2 (<= 2 classes per client)")):
        print(f"\n{title}: rounds to each test accuracy, mean ± std over seeds\n")
        print(markdown(t, data))
    alpha_figure(study, figs / "fedumf_alpha.png")
    # the alpha ordering of Figs. 3-4: rounds to 80 % (IID), per alpha
    print("\nIID, rounds to 80 % by alpha:")
    print(t[t["data"] == "iid"].groupby(["lr", "k", "variant"])[0.80].mean().unstack().round(1).to_string())
    fleet = root / "fedumf_fleet"
    if fleet.exists():
        f = fleet_figure(analysis.load(fleet, clients=False), figs / "fedumf_fleet.png")
        print("\nFleet:", f.groupby("variant")[["final", "time_to_0.85"]].agg(["mean", "std"]).round(3).to_string())
        fs = analysis.load(fleet, clients=False).summary
        cols = [c for c in fs.columns if c.startswith("fedumf.")]
        print(fs[cols].mean().round(1).to_string())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "runs" / "papers")
