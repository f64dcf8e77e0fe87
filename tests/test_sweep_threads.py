"""A sweep run's numbers do not depend on `-j` or on the host's core count: every run gets
its scenario's torch thread count (`executor.threads`, 1 unless the scenario or --threads
says otherwise, as under `flemu run`), recorded in its config.yaml and summary.json and
checked when the sweep resumes (docs/bad-input.md); the cores set only how many jobs a run
trains at once."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml

from emulator import sweep as sw
from emulator.sweep import driver

from conftest import tiny


@pytest.mark.parametrize("cores", [1, 2, 8, 64])
@pytest.mark.parametrize("workers", [1, 2, 3, 16])
def test_each_run_gets_the_cores_shared_by_the_runs_at_once(monkeypatch, cores, workers):
    monkeypatch.setattr(driver, "cores", lambda: cores)
    assert sw.run_cpus("local", workers, 100, {}) == max(1, cores // workers)
    assert sw.run_cpus("local", workers, 1, {}) == cores                 # a one-run sweep: every core
    assert sw.run_cpus("local", workers, 2, {}) == max(1, cores // min(workers, 2))
    assert sw.run_cpus("ray", workers, 100, {"num_cpus": 3.5}) == 3      # the CPUs a run reserves
    assert sw.run_cpus("ray", workers, 100, {"num_cpus": 0.5}) == 1


def spec(root, **kw):
    return sw.load_spec({"name": "t", "base": tiny(**{"run.rounds": 2}), "seeds": [0, 1], "out": str(root), **kw})


def test_j1_and_j2_on_many_cores_record_one_thread_and_give_identical_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(driver, "cores", lambda: 8)           # cores per run: 8 and 4
    a = sw.run_sweep(spec(tmp_path / "j1"), workers=1)
    b = sw.run_sweep(spec(tmp_path / "j2"), workers=2)
    assert a.counts["complete"] == b.counts["complete"] == 2
    for rid in ("seed=0", "seed=1"):
        for res in (a, b):
            d = res.dir / "runs" / rid
            assert yaml.safe_load((d / "config.yaml").read_text())["executor"]["threads"] == 1
            assert yaml.safe_load((d / "summary.json").read_text())["torch_threads"] == 1
        ma = pd.read_csv(a.dir / "runs" / rid / "metrics.csv").drop(columns="wall_time")
        mb = pd.read_csv(b.dir / "runs" / rid / "metrics.csv").drop(columns="wall_time")
        pd.testing.assert_frame_equal(ma, mb, check_exact=True)


def test_resume_with_another_thread_count_is_stale(tmp_path):
    root = tmp_path / "s"
    first = sw.run_sweep(spec(root, seeds=[0]), workers=1)
    assert first.counts["complete"] == 1
    again = sw.run_sweep(spec(root, seeds=[0]), workers=2)               # same (default) threads: skipped
    assert again.counts["skipped"] == 1 and again.counts["ran"] == 0
    with pytest.raises(sw.SweepError, match=r"executor\.threads"):
        sw.run_sweep(spec(root, seeds=[0]), workers=1, threads=2)
    redo = sw.run_sweep(spec(root, seeds=[0]), workers=1, threads=2, rerun_stale=True)
    assert redo.counts["ran"] == 1
    cfg = yaml.safe_load((root / "runs" / "seed=0" / "config.yaml").read_text())
    assert cfg["executor"]["threads"] == 2



def test_executor_threads_hold_for_their_run_only(tmp_path):
    """`executor.threads` sets torch's threads for that run; the process gets its own count
    back afterwards (a later run in the same Python session is not left on one thread)."""
    import torch
    import emulator
    from conftest import tiny
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        res = emulator.run(tiny(**{"executor": {"name": "sequential", "threads": 1}}), out=tmp_path / "r")
        assert res.summary["torch_threads"] == 1          # the run itself used one thread
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_threads_option_sets_the_base_and_a_grid_on_it_wins(tmp_path):
    plain = sw.load_spec({"name": "t", "base": tiny(), "seeds": [0], "out": str(tmp_path / "a")})
    assert sw.resolve(plain, sw.expand(plain))[0].scenario["executor"]["threads"] == 1        # the default
    assert sw.resolve(plain, sw.expand(plain), 2)[0].scenario["executor"]["threads"] == 2
    grid = sw.load_spec({"name": "t", "base": tiny(), "seeds": [0], "out": str(tmp_path / "b"),
                         "grid": {"executor.threads": [1, 3]}})
    got = [p.scenario["executor"]["threads"] for p in sw.resolve(grid, sw.expand(grid), 2)]
    assert sorted(got) == [1, 3]
