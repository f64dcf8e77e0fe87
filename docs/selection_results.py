"""The table, the headline comparison and the figures of docs/selection-study.md, from the
sweep folder of scenarios/studies/selection.yaml:

    python docs/selection_results.py [SWEEP_DIR]        (default runs/studies/selection)

1. writes docs/figures/selection_results.csv: one row per variant (selector x deadline), the
   mean over seeds of time and rounds to the target (over the seeds that reached it), final
   accuracy, the slow class's accuracy, its share of the selections and of the aggregated
   weight, clients per round and round time (analysis.metrics.compare: the numbers
   `flemu compare` prints);
2. rewrites the page's generated blocks (between `<!-- BEGIN selection-table -->` and
   `<!-- END selection-table -->`, and the same for `selection-headlines`) from that file
   alone, so the page shows what the file holds (tests/test_selection_study.py checks it);
3. draws docs/figures/selection_accuracy.png (test and slow-class accuracy against virtual
   time), selection_tradeoff.png (time to target against the slow class's accuracy) and
   selection_shares.png (each class's share of the selections and of the aggregated weight).

`--page-only` skips the figures and re-renders the page from the committed CSV.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAGE = ROOT / "docs" / "selection-study.md"
FIGURES = ROOT / "docs" / "figures"
RESULTS = FIGURES / "selection_results.csv"
SWEEP = ROOT / "scenarios" / "studies" / "selection.yaml"

SELECTORS = ["uniform", "oort", "oort_topup", "tifl", "power_of_choice", "fedcs"]
NAMES = {"uniform": "uniform", "oort": "Oort", "oort_topup": "Oort + top-up", "tifl": "TiFL",
         "power_of_choice": "power-of-choice", "fedcs": "FedCS"}
GROUPS = ["fast", "medium", "slow"]
SUFFIX = "_deadline"

# each paper's headline, short (the page lists each paper's setting beside the table)
PAPERS = {
    "oort": "Oort: 1.2x-14.1x sooner to target than random (time)",
    "oort_topup": "Oort: 1.2x-14.1x sooner to target than random (time)",
    "power_of_choice": "power-of-choice: up to 3x fewer rounds than random",
    "tifl": "TiFL: much faster than random at the same accuracy (time; no number)",
    "fedcs": "FedCS: significantly less time than random under the same deadline (FedLim)",
}


def target_of(sweep: Path = SWEEP) -> float:
    """The target accuracy the sweep's report uses (`report.target`)."""
    import yaml
    return float(yaml.safe_load(sweep.read_text())["report"]["target"])


def split(variant: str) -> tuple:
    """'oort_deadline' -> ('oort', True)."""
    return (variant[: -len(SUFFIX)], True) if variant.endswith(SUFFIX) else (variant, False)


def results(study, target: float) -> pd.DataFrame:
    """One row per variant of the sweep, in the page's order: means over seeds."""
    from analysis import metrics as AM
    c = AM.compare(study, target=target, by=["variant"]).set_index("variant")
    rows = []
    for sel in SELECTORS:
        for deadline in (False, True):
            v = sel + (SUFFIX if deadline else "")
            if v not in c.index:
                continue
            r = c.loc[v]
            get = lambda k, s="mean": float(r.get(f"{k}_{s}", np.nan))   # noqa: E731
            rows.append({
                "variant": v, "selector": sel, "deadline": deadline, "target": target,
                "runs": int(r["runs"]), "failed": int(r["failed"]), "reached": int(r.get("reached", 0)),
                "time_to_target": get("time_to_target"), "time_to_target_std": get("time_to_target", "std"),
                "rounds_to_target": get("rounds_to_target"),
                "final_acc": get("final_acc"), "final_acc_std": get("final_acc", "std"),
                "acc_fast": get("acc_group_fast"),
                "acc_slow": get("acc_group_slow"), "acc_slow_std": get("acc_group_slow", "std"), "share_clients_slow": get("share_clients_slow"),
                "share_selected_slow": get("share_selected_slow"), "share_weight_slow": get("share_weight_slow"),
                "clients_per_round": get("participants_mean"), "round_time": get("round_time_s")})
    return pd.DataFrame(rows)


def _num(v, fmt: str, none: str = "–") -> str:
    return none if v is None or (isinstance(v, float) and np.isnan(v)) else format(v, fmt)


def _pm(v, sd, fmt: str) -> str:
    """'0.852 ± 0.013' (± the std over seeds, when there are two or more)."""
    return _num(v, fmt) + ("" if np.isnan(v) or np.isnan(sd) else " ± " + format(sd, fmt))


def table_markdown(r: pd.DataFrame) -> str:
    t = r["target"].iloc[0]
    pct = f"{100 * t:g} %"
    lines = [f"| selector | deadline | reached {pct} | time to {pct} (s) | rounds to {pct} | final accuracy | "
             "slow-class accuracy | slow share of selections | slow share of aggregated weight | "
             "clients a round | round (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, x in r.iterrows():
        lines.append(
            f"| {NAMES[x['selector']]} | {'2 s' if x['deadline'] else 'none'} | {x['reached']}/{x['runs']} | "
            f"{_pm(x['time_to_target'], x['time_to_target_std'], '.0f')} | {_num(x['rounds_to_target'], '.0f')} | "
            f"{_pm(x['final_acc'], x['final_acc_std'], '.3f')} | {_pm(x['acc_slow'], x['acc_slow_std'], '.3f')} | "
            f"{_num(100 * x['share_selected_slow'], '.1f')} % | {_num(100 * x['share_weight_slow'], '.1f')} % | "
            f"{_num(x['clients_per_round'], '.1f')} | {_num(x['round_time'], '.2f')} |")
    return "\n".join(lines)


def _row(r: pd.DataFrame, variant: str):
    hit = r[r["variant"] == variant]
    return hit.iloc[0] if len(hit) else None


def _ratio(base, other, key: str) -> str:
    """How many times sooner `other` reached the target than `base` ('never' if it did not)."""
    if other is None or base is None:
        return "not run"
    if other["reached"] == 0:
        return "never reached"
    if base["reached"] == 0:
        return "reached; the baseline did not"
    return f"{base[key] / other[key]:.2f}x"


def headlines_markdown(r: pd.DataFrame) -> str:
    """Each paper's headline beside the same comparison here, per deadline setting, and what the
    selector costs the slow class against uniform selection that waits for every client."""
    t = f"{100 * r['target'].iloc[0]:g} %"
    ref = _row(r, "uniform")
    lines = [f"| the paper's headline | here, against uniform | uniform / it, to {t} | in kind | "
             "slow-class accuracy (uniform, no deadline: " + _num(ref["acc_slow"] if ref is not None else np.nan,
                                                                   ".3f") + ") | slow share of aggregated weight |",
             "|---|---|---|---|---|---|"]
    checks = [("oort", "oort", "time_to_target", "time"), ("oort", "oort_deadline", "time_to_target", "time"),
              ("oort_topup", "oort_topup", "time_to_target", "time"),
              ("oort_topup", "oort_topup_deadline", "time_to_target", "time"),
              ("power_of_choice", "power_of_choice", "rounds_to_target", "rounds"),
              ("power_of_choice", "power_of_choice_deadline", "rounds_to_target", "rounds"),
              ("tifl", "tifl", "time_to_target", "time"), ("tifl", "tifl_deadline", "time_to_target", "time"),
              ("fedcs", "fedcs_deadline", "time_to_target", "time")]
    for sel, v, key, unit in checks:
        other = _row(r, v)
        if other is None:
            continue
        deadline = split(v)[1]
        base = _row(r, "uniform" + (SUFFIX if deadline else ""))
        ratio = _ratio(base, other, key)
        ok = (ratio.endswith("x") and float(ratio[:-1]) > 1.0) or ratio.startswith("reached")
        lines.append(f"| {PAPERS[sel]} | {NAMES[sel]}, {'2 s deadline' if deadline else 'no deadline'}, {unit} | {ratio} | "
                     f"{'yes' if ok else 'no'} | {_num(other['acc_slow'], '.3f')} "
                     f"({100 * (other['acc_slow'] - ref['acc_slow']):+.1f} points) | "
                     f"{_num(100 * other['share_weight_slow'], '.1f')} % |")
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str) -> str:
    pat = re.compile(rf"(<!-- BEGIN {name} -->\n)(?:.*?\n)?(<!-- END {name} -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"{PAGE}: no <!-- BEGIN {name} --> ... <!-- END {name} --> block")
    # blank lines around the block: Python-Markdown (and the docs lint) want them around a table
    return pat.sub(lambda m: m.group(1) + "\n" + body + "\n\n" + m.group(2), text)


def render_page(text: str, r: pd.DataFrame) -> str:
    text = replace_block(text, "selection-table", table_markdown(r))
    return replace_block(text, "selection-headlines", headlines_markdown(r))


def read_results(path: Path = RESULTS) -> pd.DataFrame:
    return pd.read_csv(path)


COLOURS = dict(zip(SELECTORS, ["#555555", "#0072B2", "#56B4E9", "#009E73", "#D55E00", "#CC79A7"]))


def _mean_curves(study, y: str) -> pd.DataFrame:
    """Per variant: the mean over seeds of `y` on a common virtual-time grid."""
    from analysis import plots
    f = plots.curve_frame(study, y=y, x="virtual_time", hue="variant")
    run_variant = study.summary.set_index("run")["variant"]
    f["variant"] = f["run"].map(run_variant)
    return f.groupby(["variant", "virtual_time"], as_index=False)[y].mean()


def accuracy_figure(study, target: float, out: Path) -> None:
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True, sharey="row")
    for i, (y, label) in enumerate((("test_acc", "test accuracy"), ("acc_group_slow", "slow-class accuracy"))):
        mean = _mean_curves(study, y)
        for j, deadline in enumerate((False, True)):
            ax = axes[i, j]
            for sel in SELECTORS:
                g = mean[mean["variant"] == sel + (SUFFIX if deadline else "")]
                if len(g):
                    ax.plot(g["virtual_time"], g[y], color=COLOURS[sel], lw=1.6, label=NAMES[sel])
            if y == "test_acc":
                ax.axhline(target, color="#999", ls="--", lw=1)
                ax.set_title(f"{'2 s round deadline' if deadline else 'no deadline (wait for every client)'}")
            ax.set_ylim(0.3 if y == "test_acc" else 0.0, 0.95)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel(f"{label} (mean of 3 seeds)")
            if i == 1:
                ax.set_xlabel("virtual time (s)")
        axes[0, 1].legend(loc="lower right", fontsize=8)
    fig.suptitle("Who gets there first, and whom it leaves behind (100 clients, 25 slow)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def tradeoff_figure(r: pd.DataFrame, budget: float, out: Path) -> None:
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    never = budget * 1.08
    for _, x in r.iterrows():
        t = x["time_to_target"] if x["reached"] > 0 else never
        c = COLOURS[x["selector"]]
        ax.scatter([t], [x["acc_slow"]], s=70, marker="o" if x["reached"] == x["runs"] else "s",
                   facecolors="white" if x["deadline"] else c, edgecolors=c, linewidths=1.8, zorder=3)
        ax.annotate(NAMES[x["selector"]] + (" +dl" if x["deadline"] else ""), (t, x["acc_slow"]),
                    textcoords="offset points", xytext=(6, 4), fontsize=8, color=c)
    ax.axvline(budget, color="#999", lw=1, ls=":")
    ax.text(never, ax.get_ylim()[1], "never\nreached", ha="center", va="top", fontsize=8, color="#555")
    ax.set_xlim(0, budget * 1.18)
    ax.set_xlabel(f"virtual time to {100 * r['target'].iloc[0]:g} % test accuracy (s; mean over seeds)")
    ax.set_ylabel("slow-class accuracy at the end")
    ax.set_title("Faster to target against the slow class (filled: no deadline; hollow: 2 s deadline;\n"
                 "square: not every seed reached the target)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def shares_figure(cmp: pd.DataFrame, out: Path) -> None:
    import matplotlib.pyplot as plt
    from analysis.fairness_plots import group_colours
    colours = group_colours(GROUPS)
    variants = [v for s in SELECTORS for v in (s, s + SUFFIX) if v in set(cmp["variant"])]
    c = cmp.set_index("variant").loc[variants]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    ys = np.arange(len(variants))[::-1]
    for ax, measure, title in zip(axes, ("selected", "weight"), ("share of the selections",
                                                                  "share of the aggregated weight")):
        left = np.zeros(len(variants))
        for g in GROUPS:
            v = c[f"share_{measure}_{g}_mean"].to_numpy(float)
            ax.barh(ys, v, left=left, color=colours[g], edgecolor="white", label=g)
            left += v
        share = float(c[f"share_clients_slow_mean"].iloc[0])
        ax.axvline(1 - share, color="#333", ls="--", lw=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share (mean over seeds)")
    axes[0].set_yticks(ys, [NAMES[split(v)[0]] + (" + 2 s deadline" if split(v)[1] else "") for v in variants])
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, title="device class")
    fig.suptitle("Whom each selector trains on (dashes: where the slow class's share of the clients begins)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(args: list) -> None:
    page_only = "--page-only" in args
    args = [a for a in args if a != "--page-only"]
    if not page_only:
        import analysis
        from analysis import metrics as AM
        sweep = Path(args[0]) if args else ROOT / "runs" / "studies" / "selection"
        study = analysis.load(sweep)
        target = target_of()
        r = results(study, target)
        FIGURES.mkdir(parents=True, exist_ok=True)
        r.to_csv(RESULTS, index=False)
        budget = float(study.summary["virtual_time"].max())
        accuracy_figure(study, target, FIGURES / "selection_accuracy.png")
        tradeoff_figure(r, budget, FIGURES / "selection_tradeoff.png")
        shares_figure(AM.compare(study, target=target, by=["variant"]), FIGURES / "selection_shares.png")
    r = read_results()
    PAGE.write_text(render_page(PAGE.read_text(), r))
    print(table_markdown(r))
    print()
    print(headlines_markdown(r))


if __name__ == "__main__":
    main(sys.argv[1:])
