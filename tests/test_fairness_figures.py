"""Figures of who the model serves: `flemu plot fairness`, the report's "Who the model serves"
section, one colour per device group, and curves that are client_eval.csv's numbers."""
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

import analysis
from analysis import fairness as FA
from analysis import fairness_plots as FP

from test_client_evaluation import two_groups


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import emulator
    root = tmp_path_factory.mktemp("fig")
    a = emulator.run(two_groups(evaluation={"holdout": 0.3}), out=root / "all")
    b = emulator.run(two_groups(evaluation={"holdout": 0.3}, **{"protocol.wait": {"mode": "deadline", "seconds": 1.3}}),
                     out=root / "deadline")
    c = emulator.run(two_groups(), out=root / "plain")
    return a.run_dir, b.run_dir, c.run_dir


def test_group_curves_are_the_runs_own_group_accuracies(runs):
    st = analysis.load(list(runs[:2]))
    ga = FA.group_accuracy(st)
    for d in runs[:2]:
        m = pd.read_csv(d / "metrics.csv").dropna(subset=["test_acc"])
        for g in ("fast", "slow"):
            got = ga[(ga["run"] == d.name) & (ga["group"] == g)].sort_values("evaluation")
            assert np.allclose(got["acc"], m[f"acc_group_{g}"], rtol=0, atol=1e-12)
            assert np.allclose(got["virtual_time"], m["virtual_time"], rtol=0, atol=1e-12)


def test_one_colour_per_device_group_in_every_figure(runs):
    st = analysis.load(list(runs[:2]))
    colours = FP.group_colours(FA.groups(st))
    assert list(colours) == ["fast", "slow"] and to_rgb(colours["fast"]) != to_rgb(colours["slow"])
    want = {to_rgb(c) for c in colours.values()}
    fig = FP.group_accuracy(st)
    drawn = {to_rgb(line.get_color()) for ax in fig.axes for line in ax.lines}
    assert drawn == want and len(fig.axes) == 2                   # a panel per condition
    bars = FP.participation_bars(st)
    assert {to_rgb(p.get_facecolor()) for p in bars.axes[0].patches} == want
    cdf = FP.accuracy_cdf(st)
    dots = np.vstack([pc.get_facecolors()[:, :3] for pc in cdf.axes[0].collections])
    assert {tuple(np.round(c, 6)) for c in dots} == {tuple(np.round(c, 6)) for c in want}
    assert len(dots) == 16                                          # every client of both runs


@pytest.mark.slow
def test_flemu_plot_fairness_writes_a_signed_png(runs, tmp_path):
    from typer.testing import CliRunner

    from emulator.cli import app
    from emulator.runs.outputs import written_by_flemu
    out = tmp_path / "f.png"
    r = CliRunner().invoke(app, ["plot", "fairness", str(runs[0]), str(runs[1]), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert written_by_flemu(out) and out.stat().st_size > 20_000
    r = CliRunner().invoke(app, ["plot", "fairness", str(tmp_path)])
    assert r.exit_code == 2


@pytest.mark.slow
def test_the_report_has_a_who_the_model_serves_section(runs, tmp_path):
    from analysis import report
    p = report.write(list(runs), out=tmp_path / "r.html")
    html = p.read_text()
    section = html.split("<h2>Who the model serves</h2>")[1].split("<h2>")[0]
    for title in ("Accuracy per device group against virtual time", "Per-client accuracy at the end",
                  "Who took part", "Selections per round by device group"):
        assert f"<h3>{title}" in section
    assert section.count("data:image/png;base64,") >= 5 and "<table class='groups'>" in section
    assert (tmp_path / "r_figures" / "group_accuracy.png").exists()
    plain = report.write(runs[2], out=tmp_path / "p.html").read_text()
    assert "no per-client evaluation" in plain and "<h3>Who took part" in plain
