"""Figures and tables of docs/fedsum_results.md, from the run directories of the FedSUM sweeps
(scenarios/papers/fedsum_main.yaml, fedsum_fleet.yaml) and of the quadratic (fedsum_quadratic.yaml):

    python docs/fedsum_results.py --main runs/papers/fedsum_main --fleet runs/papers/fedsum_fleet \
        --quad runs/papers/fedsum_quadratic_all

writes docs/figures/fedsum_*.png and prints the Markdown tables."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import analysis  # noqa: E402
from analysis.plots import save  # noqa: E402

FIG = Path(__file__).resolve().parent / "figures"
ORDER = ["fedavg", "fedau", "fedawe", "fedawe_clip", "fedvarp", "mifa", "scaffold", "fedsum", "fedsum_cr", "fedsum_b"]
LAST = 10            # evaluations averaged for the "final" figures (every 2 rounds: the last 20 rounds)


def with_bytes(study):
    """Cumulative bytes communicated (up + down) per run, in MB, beside every metrics row."""
    m = study.metrics.sort_values(["run", "round"]).copy()
    m["MB"] = (m["bytes_up"] + m["bytes_down"]).groupby(m["run"]).cumsum() / 1e6
    study.metrics = m
    return study


STYLE = {"fedsum": ("tab:red", "-"), "fedsum_cr": ("tab:orange", "-"), "fedsum_b": ("tab:brown", "-"),
         "scaffold": ("tab:purple", "-."), "fedavg": ("tab:blue", "--"), "fedau": ("tab:cyan", "--"),
         "fedawe": ("tab:green", "--"), "fedawe_clip": ("tab:olive", "--"), "fedvarp": ("tab:pink", ":"),
         "mifa": ("tab:gray", ":")}


def panels(study, x, out, col="pattern", ys=(("full_train_loss", "training loss (all training samples)", True),
                                             ("test_acc", "test accuracy", False))):
    """The paper's Fig. 1 in kind: rows = training loss (log) and test accuracy, columns = the
    participation patterns; one line per method, the mean over seeds at each evaluation
    (rounds are the same in every seed; for bytes the seeds' mean bytes at that round)."""
    m = study.metrics.dropna(subset=["test_acc"])
    cols = list(dict.fromkeys(m[col])) if col else [None]
    fig, axes = plt.subplots(len(ys), len(cols), figsize=(4.6 * len(cols), 3.3 * len(ys)), squeeze=False,
                             sharex="col", sharey="row")
    for j, c in enumerate(cols):
        mc = m if c is None else m[m[col] == c]
        for v in [v for v in ORDER if v in set(mc["variant"])]:
            g = mc[mc["variant"] == v].groupby("round")[[x, *[y for y, _, _ in ys]]].mean().reset_index(drop=x == "round")
            color, ls = STYLE.get(v, ("black", "-"))
            lw, alpha = (3.0, 0.5) if v == "fedsum" else (1.4, 1.0)     # FedSUM-CR overlays FedSUM
            for i, (y, _, _) in enumerate(ys):
                axes[i, j].plot(g[x], g[y], color=color, ls=ls, lw=lw, alpha=alpha, label=v)
        for i, (y, name, logy) in enumerate(ys):
            if logy:
                axes[i, j].set_yscale("log")
            if j == 0:
                axes[i, j].set_ylabel(name)
            axes[i, j].grid(alpha=0.3)
        axes[0, j].set_title(c if c is not None else "")
        axes[-1, j].set_xlabel("round" if x == "round" else "MB communicated (up + down)")
    if ys[-1][0] == "test_acc":
        for ax in axes[-1]:
            ax.set_ylim(0.6, 1.0)
    axes[0, -1].legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    save(fig, FIG / out, formats=("png",))
    plt.close(fig)


def final_table(study, col="pattern", target=0.9) -> pd.DataFrame:
    """Per (variant, col): mean over seeds of the last LAST evaluations' full training loss and
    test accuracy (+- sd over seeds), rounds and MB to `target` test accuracy (runs that reach
    it), realised tau_max / tau_avg, peak client-state memory."""
    m, s = study.metrics, study.summary.set_index("run")
    rows = []
    keys = ["variant"] + ([col] if col else [])
    for key, g in m.groupby(keys, sort=False):
        per_run = []
        for run, r in g.groupby("run"):
            e = r.dropna(subset=["test_acc"]).sort_values("round")
            hit = e[e["test_acc"] >= target]
            per_run.append({"loss": e["full_train_loss"].iloc[-LAST:].mean(), "acc": e["test_acc"].iloc[-LAST:].mean(),
                            "r_target": hit["round"].iloc[0] if len(hit) else np.nan,
                            "mb_target": hit["MB"].iloc[0] if len(hit) else np.nan,
                            "tau_max": s.loc[run, "tau_max"], "tau_avg": s.loc[run, "tau_avg"],
                            "state_mb": study.runs[run].summary.get("client_state_peak_bytes", 0) / 1e6,
                            "mb_round": r["MB"].iloc[-1] / r["round"].max()})
        p = pd.DataFrame(per_run)
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), "runs": len(p),
                     "train_loss": p["loss"].mean(), "train_loss_sd": p["loss"].std(),
                     "test_acc": p["acc"].mean(), "test_acc_sd": p["acc"].std(),
                     "reached": int(p["r_target"].notna().sum()),
                     "rounds_to_target": p["r_target"].mean(), "MB_to_target": p["mb_target"].mean(),
                     "MB_per_round": p["mb_round"].mean(),
                     "tau_max": p["tau_max"].mean(), "tau_avg": p["tau_avg"].mean(), "state_MB": p["state_mb"].max()})
    t = pd.DataFrame(rows)
    t["variant"] = pd.Categorical(t["variant"], ORDER, ordered=True)
    return t.sort_values(keys).reset_index(drop=True)


def at_budget(study, col="pattern") -> pd.DataFrame:
    """Training loss and test accuracy at an equal communication budget: per `col` value, the
    budget is the smallest total of bytes any method used (100 rounds of the cheapest); each
    run's last evaluation within it, then the mean over seeds."""
    m = study.metrics.dropna(subset=["test_acc"])
    rows = []
    for c, mc in (m.groupby(col, sort=False) if col else [(None, m)]):
        budget = mc.groupby("run")["MB"].max().groupby(mc.groupby("run")["variant"].first()).mean().min()
        for v, g in mc.groupby("variant", sort=False):
            last = g[g["MB"] <= budget + 1e-9].sort_values("round").groupby("run").tail(1)
            rows.append({"variant": v, **({col: c} if col else {}), "budget_MB": budget,
                         "round": last["round"].mean(), "train_loss": last["full_train_loss"].mean(),
                         "test_acc": last["test_acc"].mean()})
    t = pd.DataFrame(rows)
    t["variant"] = pd.Categorical(t["variant"], ORDER, ordered=True)
    return t.sort_values(["variant"] + ([col] if col else [])).reset_index(drop=True)


def markdown(t: pd.DataFrame, col="pattern") -> str:
    head = ["method"] + ([col] if col else []) + ["train loss", "test acc", "rounds to 90 %", "MB to 90 %",
                                                   "MB / round", "tau_max", "tau_avg", "peak state MB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in t.itertuples():
        reach = f"{r.rounds_to_target:.0f} ({r.reached}/{r.runs})" if r.reached else f"- (0/{r.runs})"
        mb = f"{r.MB_to_target:.1f}" if r.reached else "-"
        cells = [str(r.variant)] + ([str(getattr(r, col))] if col else []) + [
            f"{r.train_loss:.3f} ± {r.train_loss_sd:.3f}", f"{r.test_acc:.3f} ± {r.test_acc_sd:.3f}", reach, mb,
            f"{r.MB_per_round:.2f}", f"{r.tau_max:.1f}", f"{r.tau_avg:.2f}", f"{r.state_MB:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def md(df: pd.DataFrame, index=True, fmt="{:.3g}") -> str:
    """A small DataFrame as a Markdown table (no tabulate dependency)."""
    df = df.reset_index() if index else df
    cell = lambda v: fmt.format(v) if isinstance(v, (float, np.floating)) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def ranks(t: pd.DataFrame, col="pattern", y="train_loss") -> pd.DataFrame:
    """Rank of each method (1 = best) in `y` within each `col` value."""
    asc = y != "test_acc"
    return t.pivot(index="variant", columns=col, values=y).rank(ascending=asc).astype(int)


def fleet_table(study) -> pd.DataFrame:
    """Per method (mean over seeds): uploads merged per round, `late` and `offline` drops per
    round, and the share of each device class's selections that were merged."""
    c = study.clients
    if "group" not in c:
        return pd.DataFrame()
    rows = []
    for v, g in c.groupby("variant", sort=False):
        n_runs = g["run"].nunique()
        rounds = g.groupby("run")["round"].max().sum()
        row = {"variant": v, "merged / round": (g["weight"] > 0).sum() / rounds,
               "late / round": (g["drop_reason"] == "late").sum() / rounds,
               "offline / round": (g["drop_reason"] == "offline").sum() / rounds}
        for grp, h in g.groupby("group"):
            sel = h["selected"].sum()
            row[f"{grp}: merged / selected"] = (h["weight"] > 0).sum() / sel if sel else np.nan
        row["runs"] = n_runs
        rows.append(row)
    t = pd.DataFrame(rows)
    t["variant"] = pd.Categorical(t["variant"], ORDER, ordered=True)
    return t.sort_values("variant").reset_index(drop=True)


def quadratic(path: Path):
    """||x^t - x*|| against rounds for every method of fedsum_quadratic.yaml (one run each)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = []
    for d in sorted(path.iterdir()):
        if not (d / "metrics.csv").exists():
            continue
        m = pd.read_csv(d / "metrics.csv")
        s = json.loads((d / "summary.json").read_text())
        dist = m["dist_to_opt"].to_numpy()
        ax.semilogy(m["round"], np.maximum(dist, 1e-17), label=d.name, lw=1.2,
                    ls="-" if d.name.startswith(("fedsum", "scaffold")) else "--")
        first = m.loc[m["dist_to_opt"] < 1e-6, "round"]
        rows.append({"method": d.name, "first_below_1e-6": int(first.iloc[0]) if len(first) else None,
                     "final_dist": dist[-1], "min_last3": dist[-3:].min(),
                     "tau_max": s["delay"]["0"]["tau_max"], "tau_avg": s["delay"]["0"]["tau_avg"]})
    ax.set_xlim(0, 300)
    ax.set_xlabel("round")
    ax.set_ylabel("||x - x*||")
    ax.set_title("spec quadratic (T9), pattern P: exact convergence vs stalling (first 300 of 3000 rounds)")
    ax.legend(ncol=3, fontsize=8)
    save(fig, FIG / "fedsum_quadratic", formats=("png",))
    plt.close(fig)
    return pd.DataFrame(rows)


def cases_figure(study, out):
    """Figs. 9/10/14 in kind: FedSUM's training loss under each participation case (solid),
    FedAvg's beside it (dashed, same colour); left Cases 1-4 and biased, right Case 2's p."""
    m = study.metrics.dropna(subset=["test_acc"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    groups = [["case1", "case3", "case4", "biased"], [c for c in dict.fromkeys(m["case"]) if c.startswith("case2")]]
    for ax, cases in zip(axes, groups):
        for k, c in enumerate(cases):
            color = plt.cm.tab10(k)
            for v, ls in (("fedsum", "-"), ("fedavg", "--")):
                g = m[(m["case"] == c) & (m["variant"] == v)].groupby("round")["full_train_loss"].mean()
                ax.plot(g.index, g.values, color=color, ls=ls, lw=1.4, label=f"{v} {c}")
        ax.set_yscale("log")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    axes[0].set_ylabel("training loss")
    axes[0].set_title("Cases 1, 3, 4 and biased sampling")
    axes[1].set_title("Case 2 (independent, p)")
    fig.tight_layout()
    save(fig, FIG / out, formats=("png",))
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--main", type=Path)
    ap.add_argument("--fleet", type=Path)
    ap.add_argument("--quad", type=Path)
    ap.add_argument("--cases", type=Path)
    ap.add_argument("--family", type=Path)
    a = ap.parse_args()
    if a.quad:
        print(md(quadratic(a.quad), index=False))
    if a.main:
        st = with_bytes(analysis.load(a.main, clients=False))
        panels(st, "round", "fedsum_main_rounds")
        panels(st, "MB", "fedsum_main_bytes")
        t = final_table(st)
        print(markdown(t))
        print(md(ranks(t)))
        print(md(ranks(t, y="test_acc")))
        b = at_budget(st)
        print(md(b.pivot(index="variant", columns="pattern", values="train_loss")))
        print(md(b.pivot(index="variant", columns="pattern", values="test_acc")))
        print(md(b.pivot(index="variant", columns="pattern", values="round"), fmt="{:.0f}"))
        print(md(b.groupby("pattern")["budget_MB"].first().to_frame()))
        t.to_csv(FIG / "fedsum_main_table.csv", index=False)
    if a.fleet:
        st = with_bytes(analysis.load(a.fleet, clients=True))
        panels(st, "round", "fedsum_fleet_rounds", col=None)
        panels(st, "MB", "fedsum_fleet_bytes", col=None)
        t = final_table(st, col=None)
        print(markdown(t, col=None))
        t.to_csv(FIG / "fedsum_fleet_table.csv", index=False)
        print(md(fleet_table(st), index=False))


    if a.cases:
        st = with_bytes(analysis.load(a.cases, clients=False))
        cases_figure(st, "fedsum_cases")
        t = final_table(st, col="case")
        print(md(t.pivot(index="case", columns="variant", values="train_loss")))
        print(md(t.pivot(index="case", columns="variant", values="test_acc")))
        print(md(t[t["variant"] == "fedsum"].set_index("case")[["tau_max", "tau_avg"]]))
    if a.family:
        full = with_bytes(analysis.load(a.family, clients=False))
        for lr in sorted(full.metrics["algorithm.lr"].unique(), reverse=True):
            st = with_bytes(analysis.load(a.family, clients=False))
            st.metrics = st.metrics[st.metrics["algorithm.lr"] == lr].rename(columns={"workload.batch_size": "B"})
            st.metrics["B"] = "B = " + st.metrics["B"].astype(str)
            panels(st, "round", f"fedsum_family_lr{lr}", col="B")
            t = final_table(st, col="B")
            print(f"eta_l = {lr} (constant): training loss, its s.d. over seeds, test accuracy")
            print(md(t.pivot(index="B", columns="variant", values="train_loss"), fmt="{:.4f}"))
            print(md(t.pivot(index="B", columns="variant", values="train_loss_sd"), fmt="{:.4f}"))
            print(md(t.pivot(index="B", columns="variant", values="test_acc")))


if __name__ == "__main__":
    main()
