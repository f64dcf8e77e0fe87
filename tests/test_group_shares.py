"""Who took part, per device group (docs/fairness.md): summary.json's shares are those of
clients.csv and partition.csv, they sum to 1, and `flemu compare` shows the same numbers."""
import json

import numpy as np
import pandas as pd
import pytest

from emulator.measures import group_shares as G

from test_client_evaluation import two_groups


def test_the_worked_example():
    # groups of 4, 4 and 2 clients selected 30, 8 and 2 times
    group_of = ["a"] * 4 + ["b"] * 4 + ["c"] * 2
    picks = [0] * 30 + [4] * 8 + [8] * 2
    c = pd.DataFrame({"round": np.arange(40), "client": picks, "selected": True, "weight": 1.0, "steps": 5})
    s = G.over_run(c, group_of, np.ones(10), ["a", "b", "c"])
    assert [s[g]["selected"] for g in "abc"] == pytest.approx([0.75, 0.20, 0.05])
    assert [s[g]["ratio"] for g in "abc"] == pytest.approx([1.875, 0.5, 0.25])
    assert [s[g]["never"] for g in "abc"] == pytest.approx([0.75, 0.75, 0.5])
    assert [s[g]["clients"] for g in "abc"] == pytest.approx([0.4, 0.4, 0.2])


@pytest.fixture(scope="module")
def deadline_run(tmp_path_factory):
    import emulator
    sc = two_groups(**{"protocol.wait": {"mode": "deadline", "seconds": 1.3}, "run.rounds": 8})
    return emulator.run(sc, out=tmp_path_factory.mktemp("gs") / "run")


def test_group_shares_sum_to_one_and_are_those_of_clients_csv(deadline_run):
    d = deadline_run.run_dir
    s = json.loads((d / "summary.json").read_text())["participation_by_group"]
    c = pd.read_csv(d / "clients.csv")
    p = pd.read_csv(d / "partition.csv").set_index("client")
    c["group"] = c["client"].map(p["group"])
    agg = c[c["weight"] > 0]
    assert 0 < agg["client"].isin(range(3, 8)).sum() < c[c["selected"]]["client"].isin(range(3, 8)).sum()  # cut
    want = {"selected": c[c["selected"]].groupby("group").size() / c["selected"].sum(),
            "weight": agg.groupby("group")["weight"].sum() / agg["weight"].sum(),
            "steps": c.groupby("group")["steps"].sum() / c["steps"].sum(),
            "clients": p.groupby("group").size() / len(p),
            "data": p.groupby("group")["samples"].sum() / p["samples"].sum()}
    for m, v in want.items():
        assert sum(s[g][m] for g in ("fast", "slow")) == pytest.approx(1.0, abs=1e-12)
        for g in ("fast", "slow"):
            assert s[g][m] == pytest.approx(v[g], rel=1e-12), (m, g)
    assert s["slow"]["steps"] < s["slow"]["selected"]      # the deadline cuts the slow group's work
    per = G.per_round(c, p["group"].to_numpy(), ["fast", "slow"])
    assert len(per) == 16 and np.allclose(per.groupby("round")[["selected", "weight", "steps"]].sum(), 1.0)
    r3 = c[(c["round"] == 3) & c["selected"]]
    assert per.set_index(["round", "group"]).loc[(3, "fast"), "selected"] == pytest.approx(
        (r3["group"] == "fast").mean())


def test_compare_shows_the_summarys_shares(deadline_run, tmp_path):
    from typer.testing import CliRunner

    import analysis
    from analysis import metrics as M
    from emulator.cli import app
    s = json.loads((deadline_run.run_dir / "summary.json").read_text())["participation_by_group"]
    cmp = M.compare(analysis.load(deadline_run.run_dir))
    for g in ("fast", "slow"):
        for m in ("clients", "data", "selected", "weight", "steps"):
            assert cmp[f"share_{m}_{g}_mean"].iloc[0] == pytest.approx(s[g][m], rel=1e-12)
    r = CliRunner().invoke(app, ["compare", str(deadline_run.run_dir), "--csv", str(tmp_path / "c.csv")])
    assert r.exit_code == 0, r.output
    assert "per device group" in r.output and f"{100 * s['slow']['selected']:.1f} %" in r.output


def test_a_run_without_rows_has_client_and_data_shares_and_no_participation():
    empty = pd.DataFrame(columns=["round", "client", "available", "selected", "steps", "weight"])   # object columns
    s = G.over_run(empty, ["a", "a", "b"], [1, 1, 2], ["a", "b"])
    assert s["a"]["clients"] == pytest.approx(2 / 3) and s["b"]["data"] == pytest.approx(0.5)
    assert all(np.isnan(s[g][m]) for g in "ab" for m in ("selected", "weight", "steps"))
    assert s["a"]["never"] == 1.0 and G.per_round(empty, ["a", "a", "b"], ["a", "b"]).empty
