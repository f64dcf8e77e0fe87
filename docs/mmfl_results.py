"""README's multi-model FL results (issue 14):

    python docs/mmfl_results.py [RUNS_ROOT]       (default runs/papers)

reads the sweeps of scenarios/papers/mmfl_rand_vs_rr.yaml and mmfl_gain.yaml (run them first
with `flemu sweep FILE -j 1`), runs the data-driven experiments itself (mmfl_synthetic.yaml,
mmfl_mixed.yaml, mmfl_mixed_fleet.yaml: each first the single-model / sequential baseline,
whose accuracy after T_1 rounds gives the targets, then the multi-model runs with those
targets), prints the tables and writes docs/figures/mmfl_gap.png (gap(t) mean and spread,
MFA-Rand vs MFA-RR, M = 2 and 12), docs/figures/mmfl_gain.png (gain against M).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def gap_figure(root: Path, out: Path) -> pd.DataFrame:
    import matplotlib.pyplot as plt
    import analysis
    st = analysis.load(root / "mmfl_rand_vs_rr", clients=False)
    s = st.summary.set_index("run")
    m = st.metrics[st.metrics["model"] == 0]            # one model tracked (spec Remark 3)
    lrs = sorted(s["lr"].unique())
    fig, axes = plt.subplots(2, 2 * len(lrs), figsize=(5.5 * len(lrs) * 2, 7), sharex=True)
    rows = []
    for i, (M, lr) in enumerate([(M, lr) for lr in lrs for M in (2, 12)]):
        ax_mean, ax_var = axes[0, i], axes[1, i]
        for assign, label in (("mfa_rand", "MFA-Rand"), ("mfa_rr", "MFA-RR")):
            runs = s[(s["M"].astype(int) == M) & (s["protocol.assignment"] == assign) & (s["lr"] == lr)].index
            curves = m[m["run"].isin(runs)].pivot_table(index="round", columns="run", values="log10_gap")
            if curves.empty:
                continue
            ax_mean.plot(curves.index, curves.mean(axis=1), label=label)
            ax_var.semilogy(curves.index, curves.var(axis=1) + 1e-16, label=label)
            last = curves.iloc[-1]
            rows.append({"lr": lr, "M": M, "assignment": label, "seeds": len(last),
                         "gap_1000_mean": last.mean(), "gap_1000_std": last.std(ddof=1)})
        ax_mean.set_title(f"M = {M}, lr {lr}")
        ax_mean.set_ylabel("mean gap(t) = log10(F - F*)")
        ax_var.set_ylabel("variance over seeds")
        ax_var.set_xlabel("round")
        ax_mean.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return pd.DataFrame(rows)


def gain_figure(root: Path, out: Path) -> pd.DataFrame:
    import matplotlib.pyplot as plt
    import analysis
    st = analysis.load(root / "mmfl_gain", clients=False)
    s = st.summary.set_index("run")
    rows = []
    for run in s.index:
        path = root / "mmfl_gain" / "runs" / run / "summary.json"
        if not path.exists():                  # not run (yet)
            continue
        f = json.loads(path.read_text())["multi_model"]
        rows.append({"run": run, "M": int(s.loc[run, "M"]), "E": int(s.loc[run, "protocol.local_steps"]),
                     "assignment": s.loc[run, "protocol.assignment"], "seed": int(s.loc[run, "seed"]),
                     "T_P": f["T_P"]})
    df = pd.DataFrame(rows)
    t1 = df[df["M"] == 1].groupby("E")["T_P"].mean()        # M = 1 is FedAvg on all clients (T7)
    df["gain"] = [r.M * t1[r.E] / r.T_P if r.T_P else np.nan for r in df.itertuples()]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharey=True)
    for ax, E in zip(axes, sorted(df["E"].unique())):
        for assign, label in (("mfa_rand", "MFA-Rand"), ("mfa_rr", "MFA-RR")):
            g = df[(df["E"] == E) & (df["assignment"] == assign)].groupby("M")["gain"]
            ax.errorbar(g.mean().index, g.mean(), yerr=g.std(ddof=1).fillna(0), marker="o", capsize=3, label=label)
        ax.plot([1, 12], [1, 12], ls=":", color="grey", label="g = M")
        ax.set_title(f"E = {E} (T_1 = {t1[E]:.0f} rounds)")
        ax.set_xlabel("M (models)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("gain M T_1 / T_P")
    axes[0].legend()
    fig.suptitle("Quadratic (N = 24), eps: gap <= -2.5; mean ± sd over seeds")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return df


def run(path, out, overrides=()):
    import emulator
    return emulator.run(str(path), overrides=list(overrides), out=out).summary


def last_eval(metrics: pd.DataFrame, model: int, col: str, upto: int) -> float:
    m = metrics[(metrics["model"] == model) & (metrics["round"] <= upto)].dropna(subset=[col])
    return float(m[col].iloc[-1])


def data_experiments(root: Path) -> dict:
    """Synthetic(1,1)-A gain against M (T_1 = 70) and the logistic regression + CNN pair
    (T_1 = 100), on a uniform fleet and on the heterogeneous one."""
    import emulator  # noqa: F401
    papers = ROOT / "scenarios" / "papers"
    out = {}
    # -- Synthetic(1,1)-A, full participation, targets from single-model FedAvg at T_1 = 70
    base = root / "mmfl_data"
    single = run(papers / "mmfl_synthetic.yaml", base / "synthetic_M1")
    met = pd.read_csv(base / "synthetic_M1" / "metrics.csv")
    targets = {"test_acc": last_eval(met, 0, "test_acc", 70), "full_train_acc": last_eval(met, 0, "full_train_acc", 70)}
    syn = [{"M": 1, "assignment": "fedavg", "gain_test": 1.0, "gain_train": 1.0, "T_test": 70, "T_train": 70}]
    wl = "{dataset: {name: synthetic, alpha: 1.0, beta: 1.0, dim: 60, classes: 5}, model: {name: logreg}, batch_size: 10}"
    for M in (2, 4, 5, 10):
        for assign in ("mfa_rr", "mfa_rand"):
            row = {"M": M, "assignment": assign}
            for metric, eps in targets.items():
                s = run(papers / "mmfl_synthetic.yaml", base / f"synthetic_M{M}_{assign}_{metric}",
                        [f"workloads=[{', '.join([wl] * M)}]", f"protocol.assignment={assign}",
                         f"protocol.gain.metric={metric}", f"protocol.gain.eps={eps}", "protocol.gain.T1=70",
                         "protocol.gain.stop_at_target=true", f"run.rounds={70 * M * 2}"])["multi_model"]
                key = "test" if metric == "test_acc" else "train"
                row[f"T_{key}"], row[f"gain_{key}"] = s["T_P"], s.get("gain")
            syn.append(row)
    out["synthetic"] = {"targets": targets, "single": single.get("final_test_acc"), "rows": syn}
    # -- the mixed pair, uniform and heterogeneous fleets
    for name in ("mmfl_mixed", "mmfl_mixed_fleet"):
        seq = run(papers / f"{name}.yaml", base / f"{name}_sequential",
                  ["protocol.assignment=sequential", "run.rounds=200"])["models"]
        met = pd.read_csv(base / f"{name}_sequential" / "metrics.csv")
        # each model's accuracy after its own T_1 = 100 rounds (model 1 trains in rounds 101-200)
        tg = {k: [last_eval(met, 0, k, 100), last_eval(met, 1, k, 200)] for k in ("test_acc", "full_train_acc")}
        seqsum = json.loads((base / f"{name}_sequential" / "summary.json").read_text())
        tau = {}
        mt = met[met["round"] >= 1]
        for model in (0, 1):                                   # virtual time each model's 100 rounds took
            g = mt[mt["model"] == model]
            tau[model] = float(g["virtual_time"].max() - (0.0 if model == 0 else mt[mt["model"] == 0]["virtual_time"].max()))
        row = {"targets": tg, "tau1": tau, "sequential_time": float(seqsum["virtual_time"])}
        for metric in ("test_acc", "full_train_acc"):
            s = run(papers / f"{name}.yaml", base / f"{name}_rr_{metric}",
                    [f"protocol.gain.metric={metric}", f"protocol.gain.eps={tg[metric]}", "protocol.gain.T1=100",
                     f"protocol.gain.tau1={tau[0] + tau[1]}", "protocol.gain.stop_at_target=true", "run.rounds=400"])
            row[metric] = {"T_M": s["multi_model"]["T_P"], "tau_M": s["multi_model"]["tau_P"],
                           "gain": s["multi_model"].get("gain"), "gain_time": s["multi_model"].get("gain_time")}
        out[name] = row
    (base / "results.json").write_text(json.dumps(out, indent=1, default=float))
    return out


def main(root: Path) -> None:
    figs = ROOT / "docs" / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    if (root / "mmfl_rand_vs_rr").exists():
        g = gap_figure(root, figs / "mmfl_gap.png")
        print("gap(1000), mean (std) over seeds:\n", g.round(4).to_string(index=False))
    if (root / "mmfl_gain").exists():
        d = gain_figure(root, figs / "mmfl_gain.png")
        print("\ngain against M:\n", d.groupby(["E", "assignment", "M"])[["T_P", "gain"]].agg(["mean", "std"])
              .round(3).to_string())
    if "--data" in sys.argv:
        res = data_experiments(root)
        print(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(Path(args[0]) if args else ROOT / "runs" / "papers")
