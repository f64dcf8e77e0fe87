"""Sweeps (issue 7): grid expansion, resume, failures, the local and Ray backends, SIGKILL."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import numpy as np
import pytest
import yaml

from emulator import sweep as sw
from emulator.errors import ScenarioError

from conftest import tiny

ROOT = Path(__file__).resolve().parent.parent


def spec_dict(out, **extra):
    d = {"name": "t", "base": tiny(), "out": str(out), "seeds": 2,
         "variants": {"a": {"algorithm.lr": 0.1}, "b": {"algorithm.lr": 0.05}},
         "grid": {"protocol.local_steps": [2, 4]}}
    d.update(extra)
    return d


def test_grid_variants_and_seeds_expand_to_the_expected_runs(tmp_path):
    spec = sw.load_spec(spec_dict(tmp_path / "s", seeds=[0, 7]))
    plans = sw.expand(spec)
    assert len(plans) == 2 * 2 * 2
    ids = [p.id for p in plans]
    assert ids[0] == "variant=a__local_steps=2__seed=0" and ids[-1] == "variant=b__local_steps=4__seed=7"
    p = plans[-1]
    assert p.values == {"variant": "b", "protocol.local_steps": 4} and p.seed == 7
    assert p.overrides == [("algorithm.lr", 0.05), ("protocol.local_steps", 4)]
    sw.resolve(spec, plans)
    assert p.scenario["seed"] == 7 and p.scenario["algorithm"]["lr"] == 0.05
    assert p.scenario["protocol"]["local_steps"] == 4
    assert p.scenario["output"]["dir"].endswith("runs/" + p.id)


def test_named_axes_wildcards_and_errors(tmp_path):
    d = spec_dict(tmp_path / "s", seeds=1, variants=None,
                  grid={"speed": {"slow": {"clients.groups[*].compute.step_time": 1.0},
                                  "fast": {"clients.groups[*].compute.step_time": 0.01}}})
    spec = sw.load_spec(d)
    plans = sw.resolve(spec, sw.expand(spec))
    assert [p.id for p in plans] == ["speed=slow__seed=0", "speed=fast__seed=0"]
    assert plans[0].scenario["clients"]["groups"][0]["compute"]["step_time"] == 1.0
    # every problem of every run reported together, each under its run id
    bad = spec_dict(tmp_path / "x", grid={"algorithm.lr": [-1, 0.1], "protocol.local_steps": [-3]}, seeds=1)
    with pytest.raises(ScenarioError) as e:
        s = sw.load_spec(bad)
        sw.resolve(s, sw.expand(s))
    text = str(e.value)
    assert "run variant=a__lr=-1__local_steps=-3__seed=0: algorithm.lr" in text
    assert "protocol.local_steps" in text
    with pytest.raises(ScenarioError, match="seeds"):
        sw.load_spec(spec_dict(tmp_path / "y", seeds=[1, 1]))
    with pytest.raises(ScenarioError, match="unknown key"):
        sw.load_spec({**spec_dict(tmp_path / "z"), "gird": {}})


def test_resume_skips_finished_runs_and_failures_are_recorded(tmp_path):
    bad = tmp_path / "broken.npz"                 # valid arrays, one NaN feature: refused when the run builds its data
    x = np.zeros((8, 4, 4))
    x[0, 0, 0] = np.nan
    np.savez(bad, x_train=x, y_train=np.arange(8) % 2, x_test=x[1:3], y_test=np.arange(2))
    d = spec_dict(tmp_path / "s", seeds=1, grid={},
                  variants={"ok": {"algorithm.lr": 0.1},
                            "broken": {"workload.dataset": {"name": "npz", "path": str(bad)}}})
    res = sw.run_sweep(sw.load_spec(d), workers=2, threads=1)
    idx = res.index.set_index("run")
    assert idx.loc["variant=ok__seed=0", "status"] == "complete"
    assert idx.loc["variant=broken__seed=0", "status"] == "failed"
    assert "x_train must hold finite numbers" in idx.loc["variant=broken__seed=0", "error"]
    fail = json.loads((res.dir / "failures" / "variant=broken__seed=0.json").read_text())
    assert fail["attempts"] == 1 and "Traceback" in fail["detail"]
    assert res.counts["complete"] == 1 and res.counts["failed"] == 1 and res.counts["ran"] == 2
    ok_dir = res.dir / "runs" / "variant=ok__seed=0"
    stamp = (ok_dir / "summary.json").stat().st_mtime_ns
    # resume: the finished run is skipped, the failed one retried (and fails again)
    res2 = sw.run_sweep(sw.load_spec(d), workers=2, threads=1)
    assert res2.counts["skipped"] == 1 and res2.counts["ran"] == 1
    assert (ok_dir / "summary.json").stat().st_mtime_ns == stamp
    fail = json.loads((res.dir / "failures" / "variant=broken__seed=0.json").read_text())
    assert fail["attempts"] == 2
    # --skip-failed runs nothing; the index still lists both
    res3 = sw.run_sweep(sw.load_spec(d), workers=2, threads=1, retry_failed=False)
    assert res3.counts["ran"] == 0 and len(pd.read_csv(res.dir / "sweep.csv")) == 2
    # a changed base makes the finished run stale: refused unless asked
    d2 = dict(d, base=tiny(**{"run.rounds": 4}))
    with pytest.raises(sw.SweepError, match="different scenario"):
        sw.run_sweep(sw.load_spec(d2), workers=1, threads=1)
    # a run stored before a schema field existed (its config lacks a field whose default is
    # today's value) is not stale; a stored value that differs from the plan still is
    cfg = ok_dir / "config.yaml"
    stored = yaml.safe_load(cfg.read_text())
    stored["algorithm"].pop("weighting")                  # as if written before `weighting` existed
    cfg.write_text(yaml.safe_dump(stored))
    plans = sw.resolve(sw.load_spec(d), sw.expand(sw.load_spec(d)), threads=1)   # as the sweep ran
    assert sw.scan(res.dir, plans)["variant=ok__seed=0"]["stale"] is None
    stored["algorithm"]["weighting"] = "uniform"
    cfg.write_text(yaml.safe_dump(stored))
    assert sw.scan(res.dir, plans)["variant=ok__seed=0"]["stale"] == "algorithm.weighting"


def test_resume_never_reruns_diverged_or_stalled_runs(tmp_path):
    """A diverged run and a stalled run are finished (they have their summary.json): a resumed
    sweep skips them like a complete run and leaves their directories untouched."""
    g = {k: v for k, v in tiny()["clients"]["groups"][0].items() if k != "fraction"}
    d = spec_dict(tmp_path / "s", seeds=1, grid={}, base=tiny(**{"run.rounds": 2}), variants={
        "ok": {},
        "div": {"algorithm.lr": 1e9, "run.rounds": 30, "workload.model": {"name": "mlp", "hidden": 32}},
        "stuck": {"clients.count": 2, "protocol.select": {"model": "all"},
                  "clients.groups": [dict(g, name="ok", count=1),
                                     dict(g, name="stuck", count=1, compute={"model": "iterations", "fixed": 0})]}})
    res = sw.run_sweep(sw.load_spec(d), workers=1, threads=1)
    status = res.index.set_index("run")["status"].to_dict()
    assert status == {"variant=ok__seed=0": "complete", "variant=div__seed=0": "diverged",
                      "variant=stuck__seed=0": "stalled"}
    assert res.counts["ran"] == 3 and res.counts["diverged"] == 1 and res.counts["stalled"] == 1
    stamps = {r: (res.dir / "runs" / r / "summary.json").stat().st_mtime_ns for r in status}
    again = sw.run_sweep(sw.load_spec(d), workers=1, threads=1)
    assert again.counts["ran"] == 0 and again.counts["skipped"] == 3
    assert again.index.set_index("run")["status"].to_dict() == status
    assert {r: (res.dir / "runs" / r / "summary.json").stat().st_mtime_ns for r in status} == stamps


STOP_PLUGIN = """
from emulator.api import Callback, Params, register


class StopAfterParams(Params):
    rounds: int


@register("callback", "stop_after", StopAfterParams, "stop the run after `rounds` aggregations")
class StopAfter(Callback):
    def __init__(self, p):
        self.p = p

    def after_aggregation(self, run, row):
        return row["round"] >= self.p.rounds
"""


def test_resume_never_reruns_a_run_a_callback_stopped(tmp_path):
    """A run a callback stopped (status `stopped`) is finished too: the sweep counts it
    stopped, not failed, and a resumed sweep skips it, its directory untouched."""
    (tmp_path / "stop_after.py").write_text(STOP_PLUGIN)
    base = tiny(**{"run.rounds": 3})
    base["plugins"] = [str(tmp_path / "stop_after.py")]
    base["callbacks"] = [{"name": "stop_after", "rounds": 1}]
    d = spec_dict(tmp_path / "s", seeds=1, grid={}, variants=None, base=base)
    res = sw.run_sweep(sw.load_spec(d), workers=1, threads=1)
    (rid, status), = res.index.set_index("run")["status"].to_dict().items()
    summary = json.loads((res.dir / "runs" / rid / "summary.json").read_text())
    assert status == "stopped" and summary["stopped_by"] == "stop_after" and summary["rounds"] == 1
    assert res.counts["stopped"] == 1 and res.counts["failed"] == 0 and res.counts["ran"] == 1
    assert not (res.dir / "failures" / f"{rid}.json").exists()
    stamp = (res.dir / "runs" / rid / "summary.json").stat().st_mtime_ns
    again = sw.run_sweep(sw.load_spec(d), workers=1, threads=1)
    assert again.counts["ran"] == 0 and again.counts["skipped"] == 1 and again.counts["stopped"] == 1
    assert (res.dir / "runs" / rid / "summary.json").stat().st_mtime_ns == stamp


def test_half_written_run_directory_is_not_taken_for_finished(tmp_path):
    d = spec_dict(tmp_path / "s", seeds=1, grid={}, variants={"a": {}})
    spec = sw.load_spec(d)
    plans = sw.resolve(spec, sw.expand(spec))
    run = spec.dir / "runs" / plans[0].id
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("round,test_acc\n0,0.1\n")      # no summary.json
    (spec.dir / "runs" / f".{plans[0].id}.tmp-1-2").mkdir()            # a killed run's leftover
    assert sw.scan(spec.dir, plans)[plans[0].id]["status"] == "pending"
    # flemu never leaves such a directory under a run's name (it renames a complete one into
    # place), so it is not flemu's to replace: the sweep refuses and writes nothing
    from emulator.runs.outputs import OutputError
    (spec.dir / "sweep.json").write_text(json.dumps({"name": spec.name, "axes": []}))
    with pytest.raises(OutputError, match=plans[0].id):
        sw.run_sweep(spec, workers=1, threads=1)
    assert (run / "metrics.csv").read_text() == "round,test_acc\n0,0.1\n"
    assert not (spec.dir / "sweep.csv").exists()
    (run / "metrics.csv").unlink()                                     # once it is gone (or empty)
    res = sw.run_sweep(spec, workers=1, threads=1)
    assert res.counts["ran"] == 1 and res.counts["complete"] == 1
    assert not any(p.name.startswith(".") for p in (spec.dir / "runs").iterdir())


@pytest.mark.slow
def test_ray_and_local_backends_give_identical_summaries(tmp_path):
    pytest.importorskip("ray")
    d = spec_dict(tmp_path / "local", seeds=1, grid={})
    local = sw.run_sweep(sw.load_spec(d), backend="local", workers=2, threads=1)
    d["out"] = str(tmp_path / "ray")
    ray_ = sw.run_sweep(sw.load_spec(d), backend="ray", workers=2, threads=1,
                        resources={"num_cpus": 1})
    assert ray_.counts["complete"] == 2
    cols = ["run", "final_test_acc", "virtual_time", "rounds", "bytes_up", "grad_steps_computed"]
    pd.testing.assert_frame_equal(local.index[cols], ray_.index[cols])
    for rid in local.index["run"]:
        a = pd.read_csv(tmp_path / "local" / "runs" / rid / "metrics.csv").drop(columns="wall_time")
        b = pd.read_csv(tmp_path / "ray" / "runs" / rid / "metrics.csv").drop(columns="wall_time")
        pd.testing.assert_frame_equal(a, b)
        cfg = yaml.safe_load((tmp_path / "ray" / "runs" / rid / "config.yaml").read_text())
        assert cfg["output"]["dir"] == str((tmp_path / "ray" / "runs" / rid).resolve())


def _events(root):
    return [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sigkill_then_resume_runs_every_run_exactly_once(tmp_path):
    base = tiny(**{"run.rounds": 12, "clients.count": 10})
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "k", "base": base, "seeds": 6, "out": str(tmp_path / "s")}))
    cmd = [sys.executable, "-m", "emulator.cli", "sweep", str(sweep_file), "-j", "1", "--threads", "1", "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = tmp_path / "s" / "runs"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        done = [p for p in runs.glob("*/summary.json")] if runs.exists() else []
        if len(done) >= 2:
            break
        assert proc.poll() is None, "the sweep ended before it could be killed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished_before = sorted(p.parent.name for p in runs.glob("*/summary.json"))
    assert 2 <= len(finished_before) < 6
    time.sleep(1.0)   # an orphaned run would keep writing; PDEATHSIG kills it
    assert sorted(p.parent.name for p in runs.glob("*/summary.json")) == finished_before
    stamps = {r: (runs / r / "summary.json").stat().st_mtime_ns for r in finished_before}
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    idx = pd.read_csv(tmp_path / "s" / "sweep.csv")
    assert len(idx) == 6 and (idx["status"] == "complete").all()
    # finished runs were never started again nor rewritten; the others ran after the resume
    started = [e["run"] for e in _events(tmp_path / "s") if e["event"] == "run"]
    for rid in finished_before:
        assert started.count(rid) == 1
        assert (runs / rid / "summary.json").stat().st_mtime_ns == stamps[rid]
    completes = [e["run"] for e in _events(tmp_path / "s") if e["event"] == "complete"]
    assert sorted(set(completes) | set(finished_before)) == sorted(idx["run"])
    assert len(completes) == len(set(completes))
    assert not any(p.name.startswith(".") for p in runs.iterdir())
