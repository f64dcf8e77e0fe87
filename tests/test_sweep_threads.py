"""A sweep run's numbers do not depend on `-j` or on the host's core count: every run gets
a fixed torch thread count (1 unless --threads / executor.threads say otherwise), recorded in
its config.yaml and summary.json and checked when the sweep resumes (docs/bad-input.md)."""
from __future__ import annotations

import os

import pandas as pd
import pytest
import yaml

from emulator import sweep as sw

from conftest import tiny


@pytest.mark.parametrize("cores", [1, 2, 8, 64])
@pytest.mark.parametrize("workers", [1, 2, 3, 16])
def test_default_threads_is_one_whatever_the_cores_and_workers(monkeypatch, cores, workers):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert sw.default_threads("local", workers, {}) == 1
    assert sw.default_threads("ray", workers, {"num_cpus": 3.5}) == 3      # the CPUs a run reserves


def spec(root, **kw):
    return sw.load_spec({"name": "t", "base": tiny(**{"run.rounds": 2}), "seeds": [0, 1], "out": str(root), **kw})


def test_j1_and_j2_on_many_cores_record_one_thread_and_give_identical_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)           # cores / -j would be 8 and 4
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
