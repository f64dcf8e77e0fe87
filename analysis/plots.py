"""Figures from run directories (seaborn/matplotlib, written as PNG)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from .load import load_run  # noqa: E402


def accuracy_vs_time(run_dirs, out=None, x="virtual_time", y="test_acc"):
    """Test accuracy (or any metric `y`) against virtual time (or rounds) for one or more runs.
    Returns the matplotlib Figure; writes it to `out` when given."""
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for d in run_dirs:
        r = load_run(d, clients=False)
        m = r.metrics.dropna(subset=[y]) if y in r.metrics else r.metrics.iloc[0:0]
        for model, g in m.groupby("model") if "model" in m else [(0, m)]:
            label = r.name if m["model"].nunique() <= 1 else f"{r.name} (model {model})"
            sns.lineplot(data=g, x=x, y=y, ax=ax, label=label, marker="." if len(g) < 60 else None)
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
    if out is not None:
        fig.savefig(out, dpi=120)
    return fig
