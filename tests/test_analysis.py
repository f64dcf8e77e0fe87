"""Analysis (issue 7): each metric on hand-made frames; each figure renders with its axes."""
import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from analysis import metrics as M  # noqa: E402


def metrics_frame():
    # evaluations at t = 0, 10, 20, 40 with accuracies 0.1, 0.5, 0.8, 0.9
    return pd.DataFrame({"round": [0, 1, 2, 3, 4], "model": 0, "virtual_time": [0.0, 10.0, 20.0, 30.0, 40.0],
                         "test_acc": [0.1, 0.5, 0.8, np.nan, 0.9], "round_time": [np.nan, 10.0, 10.0, 10.0, 10.0]})


def test_time_rounds_accuracy_at_budget_and_auc():
    m = metrics_frame()
    assert M.first_reach(m, 0.8) == {"round": 2, "virtual_time": 20.0}
    assert M.time_to_target(m, 0.85) == 40.0 and M.rounds_to_target(m, 0.85) == 4
    assert math.isnan(M.time_to_target(m, 0.95))
    assert M.accuracy_at(m, 25.0) == 0.8 and M.accuracy_at(m, 40.0) == 0.9
    assert math.isnan(M.accuracy_at(m.iloc[1:], 5.0))
    # step curve: 0.1*10 + 0.5*10 + 0.8*20 = 22 over 40 s
    assert M.auc(m) == pytest.approx(22 / 40)
    assert M.auc(m, until=50) == pytest.approx((22 + 0.9 * 10) / 50)
    assert M.auc(m, normalize=False) == pytest.approx(22.0)


def clients_frame():
    # two rounds, three selected clients each; round time 10
    rows = []
    for r, busy in ((1, [(2, 1), (4, 1), (8, 1)]), (2, [(1, 1), (1, 1), (5, 2)])):
        for i, (comp, comm) in enumerate(busy):
            rows.append({"round": r, "client": i, "selected": True, "available": True, "dropped": False,
                         "compute_time": comp, "comm_time": comm, "steps": [1, 2, 4][i] * r,
                         "weight": 0.0 if (r == 2 and i == 2) else 1 / 3})
    rows.append({"round": 1, "client": 3, "selected": False, "available": False, "dropped": False,
                 "compute_time": 0.0, "comm_time": 0.0, "steps": 0, "weight": 0.0})
    rows.append({"round": 2, "client": 3, "selected": False, "available": True, "dropped": False,
                 "compute_time": 0.0, "comm_time": 0.0, "steps": 0, "weight": 0.0})
    return pd.DataFrame(rows)


def test_round_latency_and_straggler_share():
    c = clients_frame()
    m = pd.DataFrame({"round": [1, 2], "virtual_time": [10.0, 20.0], "round_time": [10.0, 10.0]})
    lat = M.round_latency(c, m).set_index("round")
    assert lat.loc[1, "compute"] == pytest.approx(14 / 3) and lat.loc[1, "comm"] == pytest.approx(1.0)
    # waiting = mean over clients of round_time - busy: (7 + 5 + 1)/3
    assert lat.loc[1, "waiting"] == pytest.approx(13 / 3)
    assert lat.loc[1, "busy_median"] == 5 and lat.loc[2, "busy_median"] == 2
    # straggler share: ((10-5) + (10-2)) / 20
    assert M.straggler_share(c, m) == pytest.approx(13 / 20)
    # with three clients the median is the second largest: both references agree here
    assert M.straggler_share(c, m, reference="second") == pytest.approx(13 / 20)
    assert M.straggler_share(c, m, protocol="async") == 0.0
    assert M.straggler_share(c, m, protocol="intervals") == 0.0


def test_straggler_share_reference_median_vs_second():
    """Rounds where the median and the second-largest busy time differ, and one (a deadline
    round, round time 5) where both exceed the round time: the wait is clipped at 0."""
    busy = {1: [1, 2, 6, 9], 2: [7, 1, 3, 9, 2], 3: [1, 4, 8, 9]}     # median 4, 3, 6; second 6, 7, 8
    rows = [{"round": r, "client": i, "selected": True, "compute_time": b - 0.5, "comm_time": 0.5}
            for r, bs in busy.items() for i, b in enumerate(bs)]
    rows.append({"round": 1, "client": 9, "selected": False, "compute_time": 50.0, "comm_time": 0.0})
    c = pd.DataFrame(rows)
    m = pd.DataFrame({"round": [1, 2, 3], "virtual_time": [10.0, 22.0, 27.0], "round_time": [10.0, 12.0, 5.0]})
    lat = M.round_latency(c, m).set_index("round")
    assert list(lat["busy_median"]) == [4.0, 3.0, 6.0] and list(lat["busy_second"]) == [6.0, 7.0, 8.0]
    assert list(lat["straggler_wait"]) == [6.0, 9.0, 0.0]
    # median: ((10 - 4) + (12 - 3) + 0) / 27; second: ((10 - 6) + (12 - 7) + 0) / 27
    assert M.straggler_share(c, m) == pytest.approx(15 / 27)
    assert M.straggler_share(c, m, reference="median") == pytest.approx(15 / 27)
    assert M.straggler_share(c, m, reference="second") == pytest.approx(9 / 27)


def test_participation_leaves_out_a_round_the_budget_cut():
    """A round the time budget cut before it aggregated has rows in clients.csv (selected,
    nobody aggregated) but no row in metrics.csv: it is no aggregation, so no rate counts it."""
    c = clients_frame()
    cut = pd.DataFrame([{"round": 3, "client": i, "selected": i < 3, "available": True, "dropped": False,
                         "compute_time": 1.0, "comm_time": 0.0, "steps": 1, "weight": 0.0} for i in range(4)])
    c3 = pd.concat([c, cut], ignore_index=True)
    p = M.participation_stats(c3, "rounds", rounds=[1, 2])
    assert p == M.participation_stats(c)           # the same as the two aggregations alone
    assert p["participation_rate_mean"] == pytest.approx(np.mean([1.0, 1.0, 0.5, 0.0]))
    assert p["participants_mean"] == pytest.approx(2.5)
    old = M.participation_stats(c3)                 # without `rounds`: the cut round counts
    assert old["participation_rate_mean"] == pytest.approx(np.mean([2 / 3, 2 / 3, 1 / 3, 0.0]))
    # async: job keys are not merge numbers, `rounds` is not applied
    assert M.participation_stats(c3, "async", rounds=[1, 2])["participants_mean"] == pytest.approx(5 / 3)


def test_participation_delay_and_heterogeneity():
    c = clients_frame()
    p = M.participation_stats(c)
    assert p["participants_mean"] == pytest.approx(2.5)
    rates = np.array([1.0, 1.0, 0.5, 0.0])
    assert p["participation_rate_mean"] == pytest.approx(rates.mean())
    assert p["participation_cv"] == pytest.approx(rates.std() / rates.mean())
    assert p["never_aggregated"] == 1 and p["availability_mean"] == pytest.approx(7 / 8)
    assert p["drop_rate"] == 0.0
    d = M.delay_stats(c, num_clients=4)
    # client 3 never aggregated: its last round is 0, so tau^t = t - 0
    assert list(d["tau"]) == [1, 2] and d["tau_max"] == 2 and d["tau_avg"] == pytest.approx(1.5)
    # heterogeneity: per round the population variance of the selected clients' steps
    want = np.mean([np.var([1, 2, 4]), np.var([2, 4, 8])])
    assert M.heterogeneity(pd.DataFrame({"round": [1]}), c) == pytest.approx(want)
    assert M.heterogeneity(pd.DataFrame({"heterogeneity": [1.25, np.nan, 2.25]})) == pytest.approx(1.75)
    assert M.heterogeneity_degree([1, 1, 4, 4]) == 2.25     # T-SFL Case 1


def test_multimodel_gain():
    assert M.multimodel_gain(3, 100, 150) == 2.0
    assert math.isnan(M.multimodel_gain(3, 100, float("nan")))
    single = pd.DataFrame({"round": [0, 1, 2, 3, 4], "virtual_time": [0, 1, 2, 3, 4], "test_acc": [0.1, 0.4, 0.6, 0.7, 0.9]})
    multi = pd.DataFrame({"round": [1, 1, 2, 2, 3, 3, 4, 4], "model": [0, 1] * 4,
                          "virtual_time": [1, 1, 2, 2, 3, 3, 4, 4],
                          "test_acc": [0.3, 0.2, 0.6, 0.5, 0.7, 0.65, 0.8, 0.7]})
    # eps = 0.6: single reaches at round 2; both models of the multi run first at round 3
    assert M.multimodel_gain_from_runs(single, multi, eps=0.6) == pytest.approx(2 * 2 / 3)
    # T1 = 3: eps = 0.7 for both models; all >= 0.7 first at round 4
    assert M.multimodel_gain_from_runs(single, multi, T1=3) == pytest.approx(2 * 3 / 4)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from conftest import tiny
    from emulator import sweep as sw
    out = tmp_path_factory.mktemp("study") / "s"
    spec = sw.load_spec({"name": "fig", "base": tiny(**{"run.target_accuracy": 0.5, "run.rounds": 4}),
                         "out": str(out), "seeds": 2,
                         "variants": {"wait_all": {}, "deadline": {"protocol.wait": {"mode": "deadline", "seconds": 0.7}}}})
    res = sw.run_sweep(spec, workers=2, threads=1)
    assert res.counts["complete"] == 4
    from analysis.load import load
    return load(out)


def _labels(fig):
    return [(a.get_xlabel(), a.get_ylabel()) for a in fig.axes if a.get_xlabel() or a.get_ylabel()]


def test_study_frames_have_swept_values(study):
    assert study.axes == ["variant"] and len(study.summary) == 4
    assert set(study.metrics["variant"]) == {"wait_all", "deadline"}
    assert {"run", "variant", "seed", "round", "test_acc"} <= set(study.metrics.columns)
    assert {"run", "variant", "client", "steps", "weight"} <= set(study.clients.columns)
    cmp = M.compare(study, target=0.5)
    assert list(cmp["variant"]) == ["wait_all", "deadline"] and (cmp["runs"] == 2).all()


def test_every_figure_renders_with_its_axes(study, tmp_path):
    from analysis import plots as P
    checks = [
        (P.curves(study, out=tmp_path / "acc.png"), ("virtual time (s)", "test accuracy")),
        (P.curves(study, x="round", y="test_loss", out=tmp_path / "loss.png"), ("round", "test loss")),
        (P.target_bars(study, target=0.5, out=tmp_path / "ttt.png"), (None, "virtual time to 0.5 accuracy (s)")),
        (P.latency_breakdown(study, out=tmp_path / "lat.png"),
         ("seconds per round (mean over selected clients)", "condition")),
        (P.participation_raster(study.summary["dir"].iloc[0] if "dir" in study.summary else
                                next(iter(study.runs.values())).dir, tmp_path / "raster.png"), ("round", "client")),
    ]
    for fig, (xl, yl) in checks:
        labels = _labels(fig)
        assert labels, "no labelled axes"
        if xl is not None:
            assert any(x == xl for x, _ in labels), labels
        assert any(y == yl for _, y in labels), labels
    fig = P.times_vs_axis(study, x="seed", target=0.5, out=tmp_path / "tva.png")
    assert [(a.get_xlabel(), a.get_ylabel()) for a in fig.axes] == [
        ("seed", "virtual time of the run (s)"), ("seed", "virtual time to 0.5 accuracy (s)")]
    # every client ran its 5 steps: the local-steps figure says so (tests/test_readable_reports.py)
    steps = P.local_steps(study, out=tmp_path / "steps.png")
    assert [t.get_text() for ax in steps.axes for t in ax.texts] == [
        "every client ran 5 local steps in every round it was selected"]
    # the bars are the values: per variant, the mean over seeds of the virtual time at which
    # summary.json says the run reached 0.5 (or, reached by none, the longest run's time)
    import json
    reached, horizon = {}, 0.0
    variant = study.summary.set_index("run")["variant"]
    for rid, run in study.runs.items():
        s = json.loads((run.dir / "summary.json").read_text())
        horizon = max(horizon, s["virtual_time"])
        if s.get("reached_target"):
            reached.setdefault(variant[rid], []).append(s["reached_target"]["virtual_time"])
    want = sorted(float(np.mean(reached[v])) if v in reached else horizon for v in set(variant))
    bars = checks[2][0].axes[0].patches
    assert len(bars) == 2
    np.testing.assert_allclose(sorted(b.get_height() for b in bars), want, rtol=1e-12)
    for f in ("acc", "loss", "ttt", "steps", "lat", "raster", "tva"):
        assert (tmp_path / f"{f}.png").stat().st_size > 5000
    P.curves(study, out=tmp_path / "both")                    # no suffix: PNG and SVG
    assert (tmp_path / "both.png").stat().st_size > 5000 and (tmp_path / "both.svg").stat().st_size > 5000


@pytest.mark.slow
def test_report_and_compare_cli(study, tmp_path):
    from typer.testing import CliRunner

    from emulator.cli import app
    root = study.paths[0]
    r = CliRunner().invoke(app, ["compare", str(root), "--target", "0.5", "--csv", str(tmp_path / "c.csv")])
    assert r.exit_code == 0, r.output
    c = pd.read_csv(tmp_path / "c.csv")
    assert set(c["variant"]) == {"wait_all", "deadline"} and "time_to_target_mean" in c
    r = CliRunner().invoke(app, ["report", str(root), "--out", str(tmp_path / "rep.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "rep.html").read_text()
    assert "data:image/png;base64," in html and "wait_all" in html and "time to target" in html
    r = CliRunner().invoke(app, ["report", str(root), "--out", str(tmp_path / "rep.md")])
    assert r.exit_code == 0 and "![" in (tmp_path / "rep.md").read_text()
