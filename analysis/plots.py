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


STATES = ["offline", "available", "aggregated", "selected, not aggregated", "dropped"]
STATE_COLOURS = ["#f0f0f0", "#c6dbef", "#2171b5", "#fdae6b", "#e6550d"]


def participation_matrix(clients):
    """(clients x rounds) state codes from clients.csv: 0 offline, 1 available, 2 aggregated
    (weight > 0), 3 selected but not aggregated, 4 dropped."""
    import numpy as np

    rounds = np.array(sorted(clients["round"].unique()))
    n = int(clients["client"].max()) + 1
    m = np.zeros((n, len(rounds)), dtype=int)
    code = np.select([clients["dropped"].to_numpy(bool), clients["weight"].to_numpy() > 0,
                      clients["selected"].to_numpy(bool), clients["available"].to_numpy(bool)], [4, 2, 3, 1], 0)
    m[clients["client"].to_numpy(), np.searchsorted(rounds, clients["round"].to_numpy())] = code
    return m, rounds


def participation_raster(run_dir, out=None):
    """Clients x rounds raster of participation states. Returns the Figure."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    r = load_run(run_dir)
    m, rounds = participation_matrix(r.clients)
    fig, ax = plt.subplots(figsize=(min(14, 3 + 0.08 * len(rounds)), min(10, 2 + 0.06 * m.shape[0])))
    ax.imshow(m, aspect="auto", interpolation="nearest", cmap=ListedColormap(STATE_COLOURS), vmin=0, vmax=4,
              extent=(rounds[0] - 0.5, rounds[-1] + 0.5, m.shape[0] - 0.5, -0.5))
    ax.set_xlabel("round")
    ax.set_ylabel("client")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"participation: {r.name}")
    ax.legend(handles=[Patch(color=c, label=s) for s, c in zip(STATES, STATE_COLOURS)],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    if out is not None:
        fig.savefig(out, dpi=120)
    return fig
