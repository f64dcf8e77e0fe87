"""The report as a newcomer reads it (issue 39): what differs between conditions as one table,
one colour per condition in every comparison figure, asynchronous runs against merges apart
from the rounds of the synchronous ones, participation of every condition, a glossary that
defines every column of every table, and a T-SFL survivors figure that fits 1280 px."""
import importlib.util
import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

matplotlib.use("Agg")

from conftest import tiny  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]   # slow: the module's sweep

ROOT = Path(__file__).resolve().parents[1]
ASYNC = {"protocol": {"name": "async", "local_steps": 5},
         "algorithm": {"name": "fedasync", "lr": 0.1, "alpha": 0.6, "staleness": {"function": "polynomial", "a": 0.5}}}
TSFL = {"protocol": {"name": "intervals", "interval": 0.5, "iteration": "batch", "select": {"model": "uniform", "k": 3}},
        "algorithm": {"name": "dms", "lr": 0.1}}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """FedAvg (rounds), T-SFL DMS (intervals) and FedAsync (async) on two device groups, two
    seeds each, 3 virtual seconds."""
    from emulator import sweep as sw
    from analysis.load import load
    base = tiny(**{"run": {"virtual_time": 3.0, "eval_every_seconds": 0.5, "target_accuracy": 0.5}})
    g = base["clients"]["groups"][0]
    base["clients"]["groups"] = [dict(g, name="fast", fraction=0.5),
                                 dict(g, name="slow", fraction=0.5, compute={"model": "constant", "step_time": 0.3})]
    out = tmp_path_factory.mktemp("fixes") / "s"
    spec = sw.load_spec({"name": "fixes", "base": base, "out": str(out), "seeds": 2,
                         "variants": {"fedavg": {}, "tsfl": TSFL, "fedasync": ASYNC}})
    assert sw.run_sweep(spec, workers=1, threads=1).counts.get("complete") == 6
    return load(out)


def test_differences_are_one_table_a_row_per_condition_and_only_what_differs(study):
    from analysis import scenario_table as S
    d = S.differences(study)
    assert list(d["condition"]) == ["fedavg", "tsfl", "fedasync"] == study.conditions
    # the component blocks whose name differs fold their settings; nothing every run shares
    assert list(d.columns) == ["condition", "algorithm", "algorithm.constants", "algorithm.staleness", "protocol",
                               "protocol.select", "protocol.wait"]
    for c in d.columns[1:]:
        assert d[c].nunique() > 1, c
    row = d.set_index("condition")
    assert row.loc["fedasync", "algorithm"].startswith("fedasync (alpha 0.6, ")
    assert row.loc["fedasync", "algorithm.staleness"] == "polynomial (a 0.5, b 4.0)"
    assert row.loc["tsfl", "protocol"] == "intervals (interval 0.5, iteration batch)"
    assert row.loc["fedavg", "protocol.wait"] == "all" and row.loc["fedasync", "protocol.wait"] == "-"
    # every differing path is in exactly one column, none that is the same everywhere
    paths = S.differing_paths(study)
    assert paths and not [p for p in paths if p.startswith(("workload", "clients", "run"))]


def _legend_colours(fig) -> dict:
    """{legend label: its colour} of a figure's legends (figure- and axes-level)."""
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    out = {}
    for leg in legends:
        for h, t in zip(leg.legend_handles, leg.get_texts()):
            if isinstance(h, Patch):                       # a bar: its face, or its edge where hatched
                colour = h.get_facecolor() if h.get_facecolor()[3] > 0 else h.get_edgecolor()
            else:
                colour = h.get_color()
            if t.get_text():
                out[t.get_text().split(" (every client")[0]] = to_rgb(colour)
    return out


def test_one_colour_per_condition_in_every_comparison_figure(study, monkeypatch, tmp_path):
    from analysis import conditions as C
    from analysis import plots as P
    from analysis import report as R
    pal = C.palette(study)
    assert list(pal) == ["fedavg", "tsfl", "fedasync"]
    figs = {"time": P.curves(study), "rounds": P.curves(study, x="round"),
            "bars": P.target_bars(study, target=0.5), "steps": P.local_steps(study),
            "axis": P.times_vs_axis(study, x="seed", target=0.5)}
    for name, fig in figs.items():                  # each figure, its own default: the study's palette
        got = _legend_colours(fig)
        assert set(got) == set(pal), (name, got)
        for label, colour in got.items():
            assert colour == pytest.approx(to_rgb(pal[label])), (name, label)
    # the report builds one mapping and hands the same one to every comparison figure
    seen = []
    for fn in ("curves", "target_bars", "local_steps", "times_vs_axis"):
        real = getattr(P, fn)
        monkeypatch.setattr(P, fn, lambda *a, _real=real, _fn=fn, **k: seen.append((_fn, k.get("palette"))) or _real(*a, **k))
    study.meta.setdefault("report", {})["x"] = "seed"
    try:
        R._figures(study, tmp_path, 0.5, None)
    finally:
        study.meta["report"].pop("x")
    assert {fn for fn, _ in seen} == {"curves", "target_bars", "local_steps", "times_vs_axis"}
    assert all(p is seen[0][1] for _, p in seen) and seen[0][1] == pal


def test_asynchronous_runs_are_drawn_against_merges_not_rounds(study, monkeypatch, tmp_path):
    from analysis import conditions as C
    from analysis import plots as P
    from analysis import report as R
    fedasync = set(study.summary.loc[study.summary["variant"] == "fedasync", "run"])
    assert set(C.merge_runs(study)) == fedasync
    drawn = {}
    real = P.curves
    monkeypatch.setattr(P, "curves", lambda *a, out=None, **k: drawn.setdefault(Path(out).name, real(*a, out=out, **k)))
    figs = {t: p for t, p, _ in R._figures(study, tmp_path, 0.5, None)}
    assert figs["Test accuracy vs rounds"] and figs["Test accuracy vs merges (asynchronous)"]
    rounds, merges = drawn["accuracy_vs_rounds"], drawn["accuracy_vs_merges"]
    assert set(_legend_colours(rounds)) == {"fedavg", "tsfl"}
    assert set(_legend_colours(merges)) == {"fedasync"}
    assert merges.axes[0].get_xlabel().startswith("merges")
    last_sync_round = study.metrics[~study.metrics["run"].isin(fedasync)]["round"].max()
    assert study.metrics[study.metrics["run"].isin(fedasync)]["round"].max() > 2 * last_sync_round
    xs = [x for ax in rounds.axes for line in ax.get_lines() for x in line.get_xdata() if len(line.get_xdata()) > 2]
    assert xs and max(xs) <= last_sync_round                # the rounds axis ends with the synchronous runs


def test_participation_shows_every_condition_mean_over_seeds(study):
    from analysis import participation_plots as PP
    fig = PP.participation_states(study)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert titles == study.conditions
    shares = PP.state_shares(study)
    np.testing.assert_allclose(shares[PP.STATES].sum(axis=1), 1.0)
    c = study.clients
    for cond in study.conditions:                          # aggregated share: mean over the seeds' runs
        rows = c[(c["condition"] == cond) & (c["client"] == 5)]
        aggregated = (rows["weight"] > 0) & ~rows["dropped"].astype(bool)       # dropped wins over weight
        want = aggregated.groupby(rows["run"]).mean()
        assert len(want) == 2
        got = shares[(shares["condition"] == cond) & (shares["client"] == 5)]["aggregated"]
        assert float(got.iloc[0]) == pytest.approx(want.mean())


def test_plot_participation_titles_with_what_it_shows(study, tmp_path):
    from typer.testing import CliRunner

    from analysis import plots as P
    from emulator.cli import app
    d = Path(study.summary["dir"].iloc[0]) if "dir" in study.summary else next(iter(study.runs.values())).dir
    d = d if d.is_absolute() else study.paths[0] / d
    title = P.participation_raster(d).axes[0].get_title()
    assert title == f"each client's state in each round ({d.name})" and "tiny" not in title
    r = CliRunner().invoke(app, ["plot", "participation", str(d), "-o", str(tmp_path / "p.png")])
    assert r.exit_code == 0, r.output


class _Headers(HTMLParser):
    """Every table header cell's text, and the glossary's terms and definitions."""

    def __init__(self):
        super().__init__()
        self.headers, self.terms, self.defs, self._in = [], [], [], None

    def handle_starttag(self, tag, attrs):
        if tag in ("th", "dt", "dd"):
            self._in, self._text = tag, ""

    def handle_endtag(self, tag):
        if tag == self._in:
            {"th": self.headers, "dt": self.terms, "dd": self.defs}[tag].append(self._text.strip())
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._text += data


def test_the_glossary_defines_every_column_of_every_table(study, tmp_path):
    from analysis import report as R
    out = R.write(study, out=tmp_path / "r.html", budget=2.0)
    text = out.read_text()
    p = _Headers()
    p.feed(text)
    tables = len(re.findall("<table", text))
    assert tables == 4                        # differences, comparison, groups, every run
    assert {"tau avg", "delta", "algorithm", "wall (s)", "variant", "group", "acc. at budget"} <= set(p.headers)
    glossary = dict(zip(p.terms, p.defs))
    missing = [h for h in dict.fromkeys(p.headers) if not glossary.get(h)]
    assert not missing, missing
    assert "staleness" in glossary["tau avg"] and "variance" in glossary["delta"]
    assert "differs in" not in text


def _tsfl_results():
    spec = importlib.util.spec_from_file_location("tsfl_results", ROOT / "docs" / "tsfl_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tsfl_survivors_figure_fits_1280_pixels(tmp_path):
    """Six settings, each with fixed and estimated constants over two seeds: the panels wrap
    into a grid at most 1280 px wide, each panel at least 300 px wide."""
    import matplotlib.image as mpimg
    T = _tsfl_results()
    rows = []
    for s, _ in T.SETTINGS:
        for v in ("dms", "dms_est"):
            for seed in (0, 1):
                d = tmp_path / f"{s}_{v}_{seed}"
                d.mkdir()
                pd.DataFrame({"round": range(0, 21), "survivors": [0] + [8 + seed] * 20,
                              "weighted": [0] + [5 + seed] * 20}).to_csv(d / "metrics.csv", index=False)
                rows.append({"setting": s, "variant": v, "seed": seed, "run_dir": d})
    fig = T.figure(pd.DataFrame(rows), tmp_path / "survivors.png")
    height, width = mpimg.imread(tmp_path / "survivors.png").shape[:2]
    assert width <= 1280, (width, height)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert len(panels) == 6
    from analysis.plots import DPI
    assert min(ax.get_position().width * fig.get_figwidth() * DPI for ax in panels) >= 300      # px as saved
    assert len({round(ax.get_position().y0, 3) for ax in panels}) == 2                            # two rows
