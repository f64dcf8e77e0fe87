"""Reports and plots a newcomer can read (issue 30): legends name runs by their directory,
the report sets every condition apart (issue 39: in one table), its "every run" table fits a 1280-pixel window, the
local-steps figure says when nothing varied, `compare --by` takes any scenario path, and
`--set` expands `[*]` outside sweep files too."""
import copy
import re
from html.parser import HTMLParser

import matplotlib
import pandas as pd
import pytest
from typer.testing import CliRunner

matplotlib.use("Agg")

from conftest import tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")     # tiny runs: one thread is fastest

from emulator.cli import app  # noqa: E402


def small(**over):
    return tiny(**{"run.rounds": 2, **over})


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """Three runs of one scenario (`name: tiny`), seeds 0-2, in directories a, b, c; and one
    FedProx run in d."""
    import torch

    import emulator
    root = tmp_path_factory.mktemp("runs")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    for i, d in enumerate("abc"):
        emulator.run(small(), seed=i, out=root / d)
    emulator.run(small(**{"algorithm": {"name": "fedprox", "lr": 0.1, "mu": 0.5}}), out=root / "d")
    torch.set_num_threads(n)
    return root


def test_plot_legend_names_runs_by_their_directory(three_runs, tmp_path):
    from analysis import plots as P
    fig = P.accuracy_vs_time([three_runs / d for d in "abc"])
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["a", "b", "c"]
    r = CliRunner().invoke(app, ["plot", *(str(three_runs / d) for d in "abc"), "-o", str(tmp_path / "p.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "p.png").stat().st_size > 5000
    # two directories of one name: as many trailing parts as make them distinct
    assert P.run_labels([tmp_path / "x" / "run", tmp_path / "y" / "run"]) == ["x/run", "y/run"]


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_report_scenario_describes_each_condition(three_runs, tmp_path):
    from analysis import report as R
    out = R.write([three_runs / "a", three_runs / "d"], out=tmp_path / "r.md", figures=False)
    scen = _section(out.read_text(), "Scenario")
    heads = re.findall(r"^### (.+)$", scen, flags=re.M)
    assert heads == ["every run", "what differs between the conditions"]      # issue 39: one table
    blocks = dict(zip(heads, re.split(r"^### .+$", scen, flags=re.M)[1:]))
    assert "workload: digits / logreg" in blocks["every run"] and "algorithm" not in blocks["every run"]
    # a row per condition, a column per setting that differs: the algorithm's name, its mu folded in
    assert blocks["what differs between the conditions"].strip().splitlines() == [
        "| condition | algorithm |", "|---|---|", "| a | fedavg |", "| d | fedprox (mu 0.5) |"]
    # three runs of one scenario: one description, nothing set apart
    scen = _section(R.write([three_runs / d for d in "abc"], out=tmp_path / "s.md", figures=False).read_text(), "Scenario")
    assert re.findall(r"^### (.+)$", scen, flags=re.M) == ["every run (the same scenario)"]


class _Table(HTMLParser):
    """The cells of the table after `<h2>Every run</h2>`, each as its unbreakable pieces
    (split at spaces and at <wbr>)."""

    def __init__(self):
        super().__init__()
        self.on = self.inside = False
        self.rows, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and self.on:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = [""]
        elif self.inside and tag == "wbr" and self.cell is not None:
            self.cell.append("")

    def handle_endtag(self, tag):
        if tag == "table" and self.inside:
            self.inside = self.on = False
        elif self.inside and tag in ("td", "th"):
            self.rows[-1].append([w for piece in self.cell for w in piece.split()])
            self.cell = None

    def handle_data(self, data):
        if data.strip() == "Every run":
            self.on = True
        if self.cell is not None:
            self.cell[-1] += data


def test_every_run_table_fits_a_1280_pixel_window(tmp_path):
    """The narrowest the table can be laid out (each column as wide as its longest unbreakable
    piece, at 8 px a character at the report's 0.85em, plus 15 px of padding and border) fits
    the report's 1150-pixel body, which a 1280-pixel window holds with its margins."""
    from emulator import sweep as sw
    from analysis import report as R
    spec = sw.load_spec({"name": "wide", "base": small(**{"run.target_accuracy": 0.3}), "out": str(tmp_path / "s"),
                         "seeds": 1, "grid": {"algorithm.lr": [0.05, 0.1]},
                         "variants": {"wait_for_every_client": {},
                                      "deadline_cut": {"protocol.wait": {"mode": "deadline", "seconds": 0.7}}}})
    assert sw.run_sweep(spec, workers=1, threads=1).counts.get("failed", 0) == 0
    out = R.write(tmp_path / "s", out=tmp_path / "r.html", figures=False)
    p = _Table()
    p.feed(out.read_text())
    assert len(p.rows) == 5 and len(p.rows[0]) >= 12              # header + 4 runs, every column
    widths = [max(max((len(w) for w in cell), default=0) for cell in col) * 8 + 15 for col in zip(*p.rows)]
    assert sum(widths) <= 1150, dict(zip([" ".join(c) for c in p.rows[0]], widths))


def test_local_steps_figure_says_every_client_ran_e_steps(three_runs, tmp_path):
    from analysis import plots as P
    from analysis.load import load
    fig = P.local_steps(load([three_runs / d for d in "abc"]), out=tmp_path / "steps.png")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts == ["every client ran 5 local steps in every round it was selected"]
    assert not any(ax.lines or ax.patches or ax.collections for ax in fig.axes)   # no flat line drawn
    # steps that vary (a random step time against a deadline): the boxes per client
    import emulator
    sc = small(**{"protocol.wait": {"mode": "deadline", "seconds": 0.35}, "run.rounds": 3})
    sc["clients"]["groups"][0]["compute"] = {"model": "lognormal", "mean_step_time": 0.1, "sigma": 0.8, "redraw": "step"}
    emulator.run(sc, out=tmp_path / "v")
    fig = P.local_steps(load(tmp_path / "v"))
    assert [a.get_ylabel() for a in fig.axes if a.get_ylabel()] == ["local steps per round"]
    assert not [t for ax in fig.axes for t in ax.texts]
    # one condition fixed, one varying: lines, the fixed one saying so in the legend
    fig = P.local_steps(load([three_runs / "a", tmp_path / "v"]))
    legend = sorted(t.get_text() for t in fig.legends[0].get_texts() if t.get_text())
    assert legend == ["a (every client ran 5 steps)", "v"]


def test_compare_by_a_scenario_path_on_ad_hoc_runs(three_runs, tmp_path):
    dirs = [str(three_runs / d) for d in "abcd"]
    r = CliRunner().invoke(app, ["compare", *dirs, "--by", "algorithm.name", "--csv", str(tmp_path / "c.csv")])
    assert r.exit_code == 0, r.output
    assert re.search(r"algorithm\.name\s", r.output)                 # the column says which name
    c = pd.read_csv(tmp_path / "c.csv").set_index("algorithm.name")
    assert c.loc["fedavg", "runs"] == 3 and c.loc["fedprox", "runs"] == 1
    finals = [pd.read_csv(three_runs / d / "metrics.csv")["test_acc"].dropna().iloc[-1] for d in "abc"]
    assert c.loc["fedavg", "final_acc_mean"] == pytest.approx(sum(finals) / 3)
    r = CliRunner().invoke(app, ["compare", *dirs, "--by", "algorithm.nmae", "--csv", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "--by algorithm.nmae" in r.output and not (tmp_path / "x.csv").exists()


def test_set_wildcard_works_outside_sweep_files(tmp_path):
    import yaml

    import emulator
    sc = small()
    g = sc["clients"]["groups"][0]
    sc["clients"]["groups"] = [dict(copy.deepcopy(g), name="a", fraction=0.5), dict(copy.deepcopy(g), name="b", fraction=0.5)]
    loaded = emulator.load(sc, overrides=["clients.groups[*].compute.step_time=0.25"])
    assert [grp.compute.step_time for grp in loaded.clients.groups] == [0.25, 0.25]
    f = tmp_path / "sc.yaml"
    f.write_text(yaml.safe_dump(sc))
    r = CliRunner().invoke(app, ["validate", str(f), "--set", "clients.groups[*].availability={model: bernoulli, p: 0.5}",
                                 "--show"])
    assert r.exit_code == 0, r.output
    shown = yaml.safe_load(r.output[r.output.index("name:"):]) if "name:" in r.output else {}
    assert [grp["availability"]["p"] for grp in shown["clients"]["groups"]] == [0.5, 0.5]
    r = CliRunner().invoke(app, ["validate", str(f), "--set", "workload.batch_size[*]=3"])
    assert r.exit_code == 2 and "workload.batch_size is not a list" in r.output
