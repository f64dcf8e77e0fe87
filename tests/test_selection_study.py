"""The client-selection study (docs/selection-study.md): its sweep expands to the variants the
page reports, its fleet ties the slow devices to the digits the page says they hold, the
page's table is the committed results file, and a miniature of the sweep gives the shares
the page's pipeline computes equal to those counted from clients.csv directly.

The study itself is not run here (about 15 min): `make study-selection`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import docs_script
from emulator import sweep as sw
from emulator.scenario import schema as scenario

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "scenarios" / "studies" / "selection.yaml"
BASE = ROOT / "scenarios" / "studies" / "selection_oort.yaml"


def results_module():
    return docs_script("selection_results")


def test_the_sweep_runs_every_selector_with_and_without_the_deadline_on_three_seeds():
    spec = sw.load_spec(str(STUDY))
    plans = sw.expand(spec)
    variants = sorted({p.values["variant"] for p in plans})
    mod = results_module()
    expected = sorted(v for s in mod.SELECTORS for v in (s, s + mod.SUFFIX) if s != "fedcs") + ["fedcs_deadline"]
    assert variants == sorted(expected)
    assert len(plans) == len(expected) * 3 and {p.seed for p in plans} == {0, 1, 2}
    sw.resolve(spec, plans)
    for p in plans:
        sel, wait = p.scenario["protocol"]["select"], p.scenario["protocol"]["wait"]
        name, deadline = mod.split(p.values["variant"])
        assert sel["model"] == ("oort" if name == "oort_topup" else name)
        assert sel.get("k") == (None if name == "fedcs" else 10)
        assert bool(sel.get("fill_random")) == (name == "oort_topup")
        assert (wait["mode"] == "deadline" and wait["seconds"] == 2.0) == deadline


def test_the_slow_class_holds_most_of_the_eights_and_nines():
    """The page's premise: avoiding the slow devices avoids most 8s and 9s (seed 0: 80 % and
    92 %), the fast class holds mostly 0-4, and every client keeps 8 of its 40 rows as its
    local test set."""
    from emulator.sim.world import World
    w = World(scenario.load(str(BASE), ["run.virtual_time=1"]))
    task = w.tasks[0]
    groups = np.array([c.group for c in w.clients])
    labels = np.asarray(task.data.y_train)
    per = np.zeros((3, 10))
    for cid, rows in enumerate(task.data.client_indices):
        g = ["fast", "medium", "slow"].index(groups[cid])
        per[g] += np.bincount(labels[np.asarray(rows)], minlength=10)
    share_of_digit = per / per.sum(axis=0)
    assert share_of_digit[2, 8] > 0.75 and share_of_digit[2, 9] > 0.85 and share_of_digit[2, 7] > 0.4
    fast = per[0] / per[0].sum()
    assert fast[:5].sum() > 0.8
    assert sorted(set(task.client_sizes)) == [32]          # 40 rows, 8 held out for evaluation


def test_the_page_shows_the_committed_results_file():
    mod = results_module()
    page = (ROOT / "docs" / "selection-study.md").read_text()
    r = mod.read_results()
    assert mod.render_page(page, r) == page
    assert set(r["variant"]) == {v for s in mod.SELECTORS for v in (s, s + mod.SUFFIX)} - {"fedcs"}
    assert (r["runs"] == 3).all() and (r["failed"] == 0).all()


@pytest.mark.slow
def test_a_miniature_of_the_study_reports_the_shares_clients_csv_holds(tmp_path):
    """Two variants, one seed, 25 s of virtual time: the results table's slow share of the
    selections and of the aggregated weight equal those counted from each run's clients.csv."""
    raw = yaml.safe_load(STUDY.read_text())
    raw["base"] = str(BASE)
    raw["variants"] = {k: raw["variants"][k] for k in ("uniform", "oort_topup_deadline")}
    raw.update(seeds=1, out=str(tmp_path / "mini"), set=["run.virtual_time=25", "run.eval_every_seconds=25"])
    res = sw.run_sweep(sw.load_spec(raw), workers=1, threads=1)
    assert set(res.index["status"]) == {"complete"}
    import analysis
    mod = results_module()
    r = mod.results(analysis.load(tmp_path / "mini"), 0.84).set_index("variant")
    assert list(r.index) == ["uniform", "oort_topup_deadline"]
    for v in r.index:
        run = tmp_path / "mini" / "runs" / f"variant={v}__seed=0"
        c = pd.read_csv(run / "clients.csv")
        groups = pd.read_csv(run / "partition.csv").set_index("client")["group"]
        c["slow"] = c["client"].map(groups) == "slow"
        sel = c[c["selected"]]
        assert r.loc[v, "share_selected_slow"] == sel["slow"].mean()
        assert np.isclose(r.loc[v, "share_weight_slow"], c.loc[c["slow"], "weight"].sum() / c["weight"].sum())
    # every slow device misses the 2 s deadline: selected, never aggregated
    assert r.loc["oort_topup_deadline", "share_weight_slow"] == 0.0
