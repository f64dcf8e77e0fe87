"""Runs that did nothing, or whose checks failed, say so and are never lost (docs/reliability.md,
"Statuses and contracts"): an all-late run is `empty` (exit 0, with a warning), a run with some
empty rounds lists them (`empty_rounds`, a warning); a failed post-run invariant keeps the run
as `invalid` (exit 4); `flemu compare` and `flemu report` leave failed, invalid and empty runs
out of their tables and say which and why; a resumed sweep keeps them (`--retry-failed` re-runs)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from conftest import tiny
from emulator import sweep as sw
from emulator.cli import app
from emulator.sim.world import World

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def all_late(**over) -> dict:
    """tiny with a 0.3 s deadline: 5 steps of 0.1 s never fit, so no round aggregates anyone."""
    return tiny(**{"protocol.wait": {"mode": "deadline", "seconds": 0.3}, **over})


def some_late() -> dict:
    """lognormal steps (mean 0.2 s, sigma 1) against a 0.5 s deadline, seed 0: round 4 is empty."""
    sc = tiny(**{"protocol.wait": {"mode": "deadline", "seconds": 0.5}, "run.rounds": 4})
    sc["clients"]["groups"][0]["compute"] = {"model": "lognormal", "mean_step_time": 0.2, "sigma": 1.0}
    return sc


def cli(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, " ".join(r.output.split())


def write(tmp_path: Path, sc: dict, name: str) -> Path:
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(sc))
    return f


def test_an_all_late_run_is_empty_with_a_warning_exit_0(tmp_path):
    out = tmp_path / "late"
    code, text = cli("run", write(tmp_path, all_late(), "late"), "--out", out, "-q")
    assert code == 0 and "warning: no aggregation weighed any client: all 3 rounds aggregated nobody" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "empty" and s["empty_rounds"] == [1, 2, 3] and s["rounds"] == 3
    assert pd.read_csv(out / "metrics.csv")["participants"].tolist() == [0, 0, 0, 0]


def test_some_empty_rounds_are_listed_and_warned(tmp_path):
    out = tmp_path / "some"
    code, text = cli("run", write(tmp_path, some_late(), "some"), "--out", out, "-q")
    s = json.loads((out / "summary.json").read_text())
    m = pd.read_csv(out / "metrics.csv")
    assert code == 0 and s["status"] == "complete"
    assert s["empty_rounds"] == m.loc[(m["round"] >= 1) & (m["participants"] == 0), "round"].tolist() == [4]
    assert "warning: 1 of 4 rounds aggregated nobody (rounds 4)" in text


def test_a_failed_invariant_keeps_the_run_invalid_exit_4(tmp_path, monkeypatch):
    real_run = World.run

    def broken(self):
        real_run(self)
        self.recorder.rounds[0].weight[:] *= 2           # round 1: its weights now sum to 2

    monkeypatch.setattr(World, "run", broken)
    out = tmp_path / "bad"
    code, text = cli("run", write(tmp_path, tiny(), "bad"), "--out", out, "-q")
    assert code == 4 and "post-run invariant check failed" in text and "round 1: weights sum to 2" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "invalid" and s["invariant_failures"] == ["round 1: weights sum to 2, expected 1.0"]
    assert len(pd.read_csv(out / "metrics.csv")) == 4


@pytest.mark.slow
def test_compare_and_report_leave_out_empty_and_failed_runs_saying_why(tmp_path):
    runs = tmp_path / "runs"
    assert cli("run", write(tmp_path, tiny(), "ok"), "--out", runs / "ok", "-q")[0] == 0
    assert cli("run", write(tmp_path, all_late(), "late"), "--out", runs / "late", "-q")[0] == 0
    fail = json.loads((runs / "late" / "summary.json").read_text())        # a failed run: its summary as written
    (runs / "late2").mkdir()
    for f in (runs / "late").iterdir():
        (runs / "late2" / f.name).write_bytes(f.read_bytes())
    fail.update(status="failed", message="contract broken by algorithm 'x'.aggregate in round 2: returned None")
    (runs / "late2" / "summary.json").write_text(json.dumps(fail))
    code, text = cli("compare", runs / "ok", runs / "late", runs / "late2", "--csv", tmp_path / "c.csv")
    assert code == 0
    assert "left out: late (empty): no aggregation weighed any client" in text
    assert "left out: late2 (failed): contract broken by algorithm 'x'.aggregate in round 2" in text
    c = pd.read_csv(tmp_path / "c.csv")
    assert c["runs"].sum() == 3 and c["failed"].sum() == 2
    ok = c[c["failed"] == 0]
    assert len(ok) == 1 and ok["final_acc_mean"].notna().all()
    assert c.loc[c["failed"] == 1, "final_acc_mean"].isna().all()          # no figures from a run left out
    code, text = cli("report", runs / "ok", runs / "late", runs / "late2", "--format", "md", "-o", tmp_path / "r.md")
    md = (tmp_path / "r.md").read_text()
    assert code == 0 and "## Runs left out" in md
    left, every = md.split("## Runs left out")[1].split("## Every run")
    assert "late2 | failed | contract broken" in left and "late | empty | no aggregation" in left
    assert "| ok " in every and "late" not in every.split("## Glossary")[0]


def test_a_resumed_sweep_keeps_empty_runs_and_retry_failed_reruns_them(tmp_path):
    d = {"name": "t", "base": tiny(**{"run.rounds": 2}), "out": str(tmp_path / "s"), "seeds": 1,
         "variants": {"ok": {}, "late": {"protocol.wait": {"mode": "deadline", "seconds": 0.3}}}}
    res = sw.run_sweep(sw.load_spec(d), workers=1, threads=1)
    idx = res.index.set_index("run")
    assert idx.loc["variant=late__seed=0", "status"] == "empty" and res.counts["ran"] == 2
    assert idx.loc["variant=late__seed=0", "error"].startswith("no aggregation weighed any client")
    again = sw.run_sweep(sw.load_spec(d), workers=1, threads=1)
    assert again.counts["ran"] == 0 and again.counts["skipped"] == 2
    retried = sw.run_sweep(sw.load_spec(d), workers=1, threads=1, retry_failed=True)
    assert retried.counts["ran"] == 1 and retried.counts["skipped"] == 1
