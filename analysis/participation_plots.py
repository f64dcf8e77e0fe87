"""Who took part, per client, from clients.csv:

- participation_raster(run_dir)   one run: clients x rounds, each cell coloured by its state
                                  (offline / available / aggregated / selected, not aggregated /
                                  dropped); what `flemu plot participation` draws
- participation_states(study)     every condition of a study: per client, the share of its
                                  clients.csv rows in each state, mean over seeds (one panel per
                                  condition, wrapped into a grid that fits 1280 px)
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .load import load_run
from .plots import _study, plt, save, sns

STATES = ["offline", "available", "aggregated", "selected, not aggregated", "dropped"]
STATE_COLOURS = ["#f0f0f0", "#c6dbef", "#2171b5", "#fdae6b", "#e6550d"]
PANEL_COLUMNS = 4                  # participation_states: panels per row
PANEL_INCHES = (2.55, 2.1)         # each panel: 4 a row is 10.2 in, 1224 px at the figures' 120 dpi


def state_codes(clients) -> np.ndarray:
    """The state of each clients.csv row: 0 offline, 1 available, 2 aggregated (weight > 0),
    3 selected but not aggregated, 4 dropped."""
    return np.select([clients["dropped"].to_numpy(bool), clients["weight"].to_numpy() > 0,
                      clients["selected"].to_numpy(bool), clients["available"].to_numpy(bool)], [4, 2, 3, 1], 0)


def participation_matrix(clients):
    """(clients x rounds) state codes from clients.csv (`state_codes`), and the rounds."""
    rounds = np.array(sorted(clients["round"].unique()))
    n = int(clients["client"].max()) + 1
    m = np.zeros((n, len(rounds)), dtype=int)
    m[clients["client"].to_numpy(), np.searchsorted(rounds, clients["round"].to_numpy())] = state_codes(clients)
    return m, rounds


def participation_raster(run_dir, out=None, title=None):
    """Clients x rounds raster of participation states. Returns the Figure. Its title says
    what it shows and which run directory it comes from."""
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
    ax.set_title(title or f"each client's state in each round ({Path(run_dir).resolve().name})", fontsize=10)
    ax.legend(handles=[Patch(color=c, label=s) for s, c in zip(STATES, STATE_COLOURS)],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    if out is not None:
        save(fig, out)
    return fig


def state_shares(study) -> pd.DataFrame:
    """Per condition and client: the share of its clients.csv rows in each state (columns
    STATES), averaged over the condition's seeds (runs)."""
    c = study.clients
    if c.empty:
        return pd.DataFrame(columns=["condition", "client", *STATES])
    codes = pd.Series(state_codes(c), index=c.index)
    per_run = pd.crosstab([c["condition"], c["run"], c["client"]], codes, normalize="index")
    per_run = per_run.reindex(columns=range(len(STATES)), fill_value=0.0)
    per_run.columns = STATES
    out = per_run.groupby(level=["condition", "client"], sort=False).mean().reset_index()
    order = {k: i for i, k in enumerate(study.conditions)}
    return out.sort_values(["condition", "client"], key=lambda s: s.map(order) if s.name == "condition" else s)


def participation_states(study, out=None):
    """Every condition: per client, stacked bars of the share of its rows (rounds; jobs under
    an asynchronous protocol) in each state, mean over seeds. Returns the Figure."""
    from matplotlib.patches import Patch
    study = _study(study)
    df = state_shares(study)
    conds = list(dict.fromkeys(df["condition"])) if len(df) else []
    if not conds:
        raise ValueError("no clients.csv rows in this study")
    cols = min(PANEL_COLUMNS, len(conds))
    rows = math.ceil(len(conds) / cols)
    sns.set_theme(style="whitegrid")
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_INCHES[0] * cols, PANEL_INCHES[1] * rows + 0.6),
                             squeeze=False, sharey=True)
    for ax, cond in zip(axes.flat, conds):
        d = df[df["condition"] == cond]
        bottom = np.zeros(len(d))
        for s, colour in zip(STATES, STATE_COLOURS):
            ax.bar(d["client"], d[s], bottom=bottom, width=0.9, color=colour, lw=0)
            bottom += d[s].to_numpy()
        ax.set_title(str(cond), fontsize=8)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("client", fontsize=8)
    for ax in axes.flat[len(conds):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("share of rounds", fontsize=8)
    fig.legend(handles=[Patch(color=c, label=s) for s, c in zip(STATES, STATE_COLOURS)], loc="lower center",
               ncol=len(STATES), fontsize=8, frameon=False)
    fig.suptitle("participation: each client's share of rounds (async: jobs) in each state, mean over seeds",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    save(fig, out)
    return fig
