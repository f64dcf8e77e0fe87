"""The tables and figures of docs/studies/compression.md, from the sweep folders of
scenarios/studies/compression.yaml and compression_dp.yaml:

    python docs/compression_results.py [CODEC_SWEEP_DIR [DP_SWEEP_DIR]]
        (default runs/studies/compression and runs/studies/compression_dp)

1. writes docs/figures/compression_results.csv (one row per codec x deadline: the mean and
   spread over seeds of time, rounds and megabytes uploaded to the target, final accuracy,
   bytes of one upload, round time, the slow class's share of the aggregated weight, the
   codec's relative error; analysis.metrics.run_metrics gives the per-run figures `flemu
   compare` prints) and docs/figures/compression_dp_results.csv (one row per noise
   multiplier: final accuracy, epsilon under both accounting assumptions);
2. rewrites the page's generated blocks (between `<!-- BEGIN compression-table -->` and
   `<!-- END compression-table -->`, and the same for `compression-dp-table`) from those files
   alone, so the page shows what the files hold (tests/test_compression_study.py checks it);
3. draws docs/figures/compression_accuracy_time.png (test accuracy against virtual time),
   compression_accuracy_bytes.png (against megabytes uploaded) and dp_epsilon_accuracy.png
   (final accuracy against epsilon, both assumptions).

`--page-only` skips the figures and re-renders the page from the committed CSV files.
A variant whose runs are absent from the sweep folder (PowerSGD, until it is built) is left out.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAGE = ROOT / "docs" / "studies" / "compression.md"
FIGURES = ROOT / "docs" / "figures"
RESULTS = FIGURES / "compression_results.csv"
DP_RESULTS = FIGURES / "compression_dp_results.csv"
SWEEP = ROOT / "scenarios" / "studies" / "compression.yaml"
DP_SWEEP = ROOT / "scenarios" / "studies" / "compression_dp.yaml"

# the page's order; a codec the sweep did not run (powersgd2 until it is built) is skipped
CODECS = ["none", "fp16", "qsgd4", "top1_ef", "powersgd2"]
NAMES = {"none": "none (fp32)", "fp16": "fp16", "qsgd4": "QSGD 4-bit (s = 15)",
         "top1_ef": "top-1 % + EF", "powersgd2": "PowerSGD rank 2"}
SUFFIX = "_deadline"
MB = 1e6


def target_of(sweep: Path = SWEEP) -> float:
    """The target accuracy the sweep's report uses (`report.target`)."""
    import yaml
    return float(yaml.safe_load(sweep.read_text())["report"]["target"])


def deadline_of(sweep: Path = SWEEP) -> float:
    """The round deadline (s) of the sweep's `_deadline` variants."""
    import yaml
    v = yaml.safe_load(sweep.read_text())["variants"]
    return float(next(x["protocol.wait"]["seconds"] for k, x in v.items() if k.endswith(SUFFIX)))


def split(variant: str) -> tuple:
    """'qsgd4_deadline' -> ('qsgd4', True)."""
    return (variant[: -len(SUFFIX)], True) if variant.endswith(SUFFIX) else (variant, False)


def with_cumulative_bytes(metrics: pd.DataFrame) -> pd.DataFrame:
    """metrics.csv's per-aggregation `bytes_up`, summed over each run's aggregations so far
    (`mb_up`, megabytes uploaded by the end of that aggregation)."""
    m = metrics.sort_values(["run", "round"]).copy()
    m["mb_up"] = m.groupby("run")["bytes_up"].cumsum() / MB
    return m


def bytes_to_target(m: pd.DataFrame, target: float) -> float:
    """Megabytes uploaded by the end of the first aggregation whose evaluation reached `target`
    (NaN if none did): m is one run's metrics with `mb_up`."""
    hit = m[m["test_acc"].notna() & (m["test_acc"] >= target)]
    return float(hit["mb_up"].iloc[0]) if len(hit) else np.nan


def per_run(study, target: float) -> pd.DataFrame:
    """analysis.metrics.run_metrics (time and rounds to target, final accuracy, round time, the
    slow class's share of the aggregated weight) and, per run: megabytes uploaded to the target
    and in all, bytes of one upload and the codec's mean relative error."""
    from analysis import metrics as AM
    pr = AM.run_metrics(study, target=target).set_index("run")
    m = with_cumulative_bytes(study.metrics)
    c = study.clients
    rows = []
    for run, g in m.groupby("run"):
        uploads = c[(c["run"] == run) & (c["bytes_up"] > 0)]["bytes_up"] if len(c) else pd.Series(dtype=float)
        rows.append({"run": run, "mb_to_target": bytes_to_target(g, target), "mb_up": float(g["mb_up"].iloc[-1]),
                     "upload_bytes": float(uploads.median()) if len(uploads) else np.nan,
                     "codec_error": float(g["codec_error"].mean()) if "codec_error" in g else 0.0})
    return pr.join(pd.DataFrame(rows).set_index("run")).reset_index()


def _mean_sd(v: pd.Series) -> tuple:
    v = pd.to_numeric(v, errors="coerce").dropna()
    if np.isinf(v).any():                  # epsilon without noise: infinite, no spread
        return float(v.max()), np.nan
    return (float(v.mean()) if len(v) else np.nan, float(v.std(ddof=1)) if len(v) > 1 else np.nan)


def results(study, target: float) -> pd.DataFrame:
    """One row per variant of the codec sweep, in the page's order: means (and standard
    deviations) over seeds; time, rounds and bytes to target over the seeds that reached it."""
    pr = per_run(study, target)
    rows = []
    for codec in CODECS:
        for deadline in (False, True):
            v = codec + (SUFFIX if deadline else "")
            g = pr[pr["variant"] == v]
            if not len(g):
                continue
            row = {"variant": v, "codec": codec, "deadline": deadline, "target": target, "runs": len(g),
                   "failed": int((~g["status"].isin(["complete", "stopped", "stalled", "diverged"])).sum()),
                   "reached": int(g["time_to_target"].notna().sum())}
            for k in ("time_to_target", "rounds_to_target", "mb_to_target", "final_acc", "best_acc", "mb_up",
                      "upload_bytes", "round_time_s", "participants_mean", "share_weight_slow", "codec_error"):
                row[k], row[k + "_std"] = _mean_sd(g[k]) if k in g else (np.nan, np.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def dp_results(study) -> pd.DataFrame:
    """One row per noise multiplier of the DP sweep: final accuracy (mean, sd over seeds),
    rounds, and the final epsilon under both assumptions (from each run's summary.json; the
    same for every seed of a multiplier when the runs aggregated equally often)."""
    from analysis import metrics as AM
    pr = AM.run_metrics(study).set_index("run")
    rows = []
    for run, r in study.runs.items():
        dp = (r.summary or {}).get("dp") or {}
        rows.append({"run": run, "noise_multiplier": dp.get("noise_multiplier"), "q": dp.get("q"),
                     "clip": dp.get("clip_norm_initial"), "eps_poisson": dp.get("dp_epsilon_poisson"),
                     "eps_noamp": dp.get("dp_epsilon_noamp"), "delta": (r.summary or {}).get("dp_delta")})
    d = pr.join(pd.DataFrame(rows).set_index("run"))
    out = []
    for z, g in d.groupby("noise_multiplier", sort=True):
        row = {"noise_multiplier": float(z), "runs": len(g), "q": float(g["q"].iloc[0]), "clip": float(g["clip"].iloc[0]),
               "delta": float(g["delta"].iloc[0])}
        for k in ("final_acc", "best_acc", "rounds", "eps_poisson", "eps_noamp"):
            row[k], row[k + "_std"] = _mean_sd(g[k])
        out.append(row)
    return pd.DataFrame(out)


def _num(v, fmt: str, none: str = "–") -> str:
    return none if v is None or (isinstance(v, float) and np.isnan(v)) else format(v, fmt)


def _pm(v, sd, fmt: str) -> str:
    """'0.852 ± 0.013' (± the standard deviation over seeds, when there are two or more)."""
    return _num(v, fmt) + ("" if np.isnan(v) or np.isnan(sd) else " ± " + format(sd, fmt))


def _speedup(r: pd.DataFrame, x) -> str:
    """How many times sooner than no compression with the same deadline setting (virtual time)."""
    base = r[(r["codec"] == "none") & (r["deadline"] == x["deadline"])]
    if not len(base) or x["reached"] == 0 or base["reached"].iloc[0] == 0:
        return "–"
    return f"{base['time_to_target'].iloc[0] / x['time_to_target']:.2f}x"


def table_markdown(r: pd.DataFrame, deadline: float) -> str:
    pct = f"{100 * r['target'].iloc[0]:g} %"
    lines = [f"| codec | deadline | bytes of one upload | reached {pct} | time to {pct} (s) | sooner than none | "
             f"rounds to {pct} | MB uploaded to {pct} | final accuracy | MB uploaded in all | round (s) | "
             "slow share of aggregated weight | codec error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, x in r.iterrows():
        lines.append(
            f"| {NAMES[x['codec']]} | {f'{deadline:g} s' if x['deadline'] else 'none'} | {_num(x['upload_bytes'], ',.0f')} | "
            f"{x['reached']}/{x['runs']} | {_pm(x['time_to_target'], x['time_to_target_std'], '.1f')} | {_speedup(r, x)} | "
            f"{_num(x['rounds_to_target'], '.0f')} | {_pm(x['mb_to_target'], x['mb_to_target_std'], '.2f')} | "
            f"{_pm(x['final_acc'], x['final_acc_std'], '.3f')} | {_num(x['mb_up'], '.1f')} | {_num(x['round_time_s'], '.2f')} | "
            f"{_num(100 * x['share_weight_slow'], '.1f')} % | {_err(x['codec_error'], x['codec'])} |")
    return "\n".join(lines)


def _err(v, codec: str) -> str:
    """The codec's mean relative error: '–' for none, 3 significant digits otherwise."""
    return "–" if codec == "none" or v is None or np.isnan(v) else format(v, ".3g")


def dp_table_markdown(d: pd.DataFrame) -> str:
    lines = ["| noise multiplier z | final accuracy | best accuracy | aggregations | ε, Poisson sampling at q | "
             "ε, no amplification |",
             "|---|---|---|---|---|---|"]
    for _, x in d.iterrows():
        z = "0 (clipping only)" if x["noise_multiplier"] == 0 else f"{x['noise_multiplier']:g}"
        lines.append(f"| {z} | {_pm(x['final_acc'], x['final_acc_std'], '.3f')} | {_pm(x['best_acc'], x['best_acc_std'], '.3f')} | "
                     f"{_num(x['rounds'], '.0f')} | {_eps(x['eps_poisson'])} | {_eps(x['eps_noamp'])} |")
    return "\n".join(lines)


def _eps(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "–"
    return "∞" if np.isinf(v) else (f"{v:.2f}" if v < 100 else f"{v:,.0f}")


def replace_block(text: str, name: str, body: str) -> str:
    pat = re.compile(rf"(<!-- BEGIN {name} -->\n)(?:.*?\n)?(<!-- END {name} -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"{PAGE}: no <!-- BEGIN {name} --> ... <!-- END {name} --> block")
    # blank lines around the block: Python-Markdown (and the docs lint) want them around a table
    return pat.sub(lambda m: m.group(1) + "\n" + body + "\n\n" + m.group(2), text)


def render_page(text: str, r: pd.DataFrame, d: pd.DataFrame) -> str:
    text = replace_block(text, "compression-table", table_markdown(r, deadline_of()))
    return replace_block(text, "compression-dp-table", dp_table_markdown(d))


def read_results() -> tuple:
    return pd.read_csv(RESULTS), pd.read_csv(DP_RESULTS)


COLOURS = dict(zip(CODECS, ["#555555", "#0072B2", "#009E73", "#D55E00", "#CC79A7"]))


def _mean_curve(study, runs, x: str, grid: np.ndarray) -> np.ndarray:
    """The mean over `runs` of each run's test-accuracy step curve against `x`, on `grid`
    (NaN past a run's last point)."""
    from analysis.plots import _resample
    m = study.metrics
    ys = []
    for run in runs:
        g = m[m["run"] == run]
        ys.append(_resample(g, "test_acc", x, grid, float(g[x].max())))
    if not ys:
        return np.full(len(grid), np.nan)
    with np.errstate(all="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore", RuntimeWarning)     # past every run's end: NaN
        return np.nanmean(np.vstack(ys), axis=0)


def _panels(study, target: float, deadline: float, x: str, grid, xlabel: str, title: str, out: Path, logx=False):
    import matplotlib.pyplot as plt
    s = study.summary
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for j, dl in enumerate((False, True)):
        ax = axes[j]
        for codec in CODECS:
            runs = s[s["variant"] == codec + (SUFFIX if dl else "")]["run"].tolist()
            if runs:
                ax.plot(grid, _mean_curve(study, runs, x, grid), color=COLOURS[codec], lw=1.6, label=NAMES[codec])
        ax.axhline(target, color="#999", ls="--", lw=1)
        ax.set_title(f"{deadline:g} s round deadline" if dl else "no deadline (wait for every client)", fontsize=10)
        ax.set_xlabel(xlabel)
        if logx:
            ax.set_xscale("log")
        ax.set_ylim(0.3, 0.95)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (mean of 3 seeds)")
    axes[1].legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def accuracy_figures(study, target: float, deadline: float) -> None:
    study.metrics = with_cumulative_bytes(study.metrics)
    top = float(study.metrics["virtual_time"].max())
    _panels(study, target, deadline, "virtual_time", np.linspace(0, top, 241), "virtual time (s)",
            "Test accuracy against virtual time, per upload codec (30 clients, 10 on a 0.5 Mbit/s uplink)",
            FIGURES / "compression_accuracy_time.png")
    lo, hi = float(study.metrics["mb_up"][study.metrics["mb_up"] > 0].min()), float(study.metrics["mb_up"].max())
    _panels(study, target, deadline, "mb_up", np.geomspace(lo, hi, 300), "megabytes uploaded by the fleet (log scale)",
            "Test accuracy against bytes uploaded, per upload codec", FIGURES / "compression_accuracy_bytes.png", logx=True)


def dp_figure(d: pd.DataFrame, baseline: float, out: Path) -> None:
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    finite = d[np.isfinite(d["eps_poisson"])]
    for key, label, marker in (("eps_poisson", "Poisson sampling at q (what papers report)", "o"),
                               ("eps_noamp", "no amplification (any client in every round)", "s")):
        ax.errorbar(finite[key], finite["final_acc"], yerr=finite["final_acc_std"], fmt=marker + "-", capsize=3,
                    label=label, ms=7)
        for _, x in finite.iterrows():
            ax.annotate(f"z = {x['noise_multiplier']:g}", (x[key], x["final_acc"]), textcoords="offset points",
                        xytext=(6, -12), fontsize=8)
    if not np.isnan(baseline):
        ax.axhline(baseline, color="#555", ls="--", lw=1, label="no noise (z = 0, ε = ∞)")
    ax.set_ylim(top=max(float(d["final_acc"].max()), 0 if np.isnan(baseline) else baseline) + 0.05)
    ax.set_xscale("log")
    ax.set_xlabel("ε at δ = 1e-5 after the run (log scale)")
    ax.set_ylabel("final test accuracy (mean ± sd of 3 seeds)")
    ax.set_title("DP-FedAvg: accuracy against ε under both accounting assumptions", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(args: list) -> None:
    page_only = "--page-only" in args
    args = [a for a in args if a != "--page-only"]
    if not page_only:
        import analysis
        sweep = Path(args[0]) if args else ROOT / "runs" / "studies" / "compression"
        dp_sweep = Path(args[1]) if len(args) > 1 else ROOT / "runs" / "studies" / "compression_dp"
        study, dp_study = analysis.load(sweep), analysis.load(dp_sweep)
        target, deadline = target_of(), deadline_of()
        r, d = results(study, target), dp_results(dp_study)
        FIGURES.mkdir(parents=True, exist_ok=True)
        r.to_csv(RESULTS, index=False)
        d.to_csv(DP_RESULTS, index=False)
        accuracy_figures(study, target, deadline)
        z0 = d[d["noise_multiplier"] == 0]["final_acc"]
        dp_figure(d, float(z0.iloc[0]) if len(z0) else np.nan, FIGURES / "dp_epsilon_accuracy.png")
    r, d = read_results()
    PAGE.write_text(render_page(PAGE.read_text(), r, d))
    print(table_markdown(r, deadline_of()))
    print()
    print(dp_table_markdown(d))


if __name__ == "__main__":
    main(sys.argv[1:])
