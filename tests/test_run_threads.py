"""`flemu run` and a sweep resolve the same torch thread count for the same scenario
(`executor.threads`, 1 unless the scenario says: compute/threads.py), record it in
config.yaml, and a replay of that config.yaml reproduces metrics.csv bit for bit, whatever
torch's own thread count in the replaying process (docs/bad-input.md, "What is bit-identical").

The scenario (cnn_mnist, float32, 28 x 28) gives other bits on two intra-op threads than on
one (train_loss about 1e-7 apart), so a count taken from the process instead of the record
shows in the metrics."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from emulator import sweep as sw

from conftest import tiny

ROOT = Path(__file__).resolve().parents[1]


def scenario() -> dict:
    return tiny(**{"workload.dataset": {"name": "mnist5k", "test_fraction": 0.1}, "workload.model.name": "cnn_mnist",
                   "run.rounds": 2})


def flemu(*args, threads: int):
    """`flemu ARGS` in a fresh process whose torch default is `threads` (a user's machine)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-m", "emulator.cli", *map(str, args), "-q"], capture_output=True,
                       text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


def metrics(d: Path) -> pd.DataFrame:
    return pd.read_csv(d / "metrics.csv").drop(columns="wall_time")


@pytest.mark.slow
def test_run_and_one_run_sweep_resolve_the_same_threads_and_numbers(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(scenario()))
    flemu("run", f, "--out", tmp_path / "run", threads=2)            # a 2-core user's `flemu run`
    res = sw.run_sweep(sw.load_spec({"name": "one", "base": str(f), "out": str(tmp_path / "sw")}), workers=1)
    assert res.counts["complete"] == 1
    (swept,) = (res.dir / "runs").iterdir()
    run_cfg = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    sweep_cfg = yaml.safe_load((swept / "config.yaml").read_text())
    assert run_cfg["executor"]["threads"] == 1 and run_cfg["executor"] == sweep_cfg["executor"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["torch_threads"] == 1
    pd.testing.assert_frame_equal(metrics(tmp_path / "run"), metrics(swept), check_exact=True)


@pytest.mark.slow
def test_a_replay_uses_the_recorded_threads_and_reproduces_metrics(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(scenario()))
    flemu("run", f, "--out", tmp_path / "a", threads=1)
    flemu("run", tmp_path / "a" / "config.yaml", "--out", tmp_path / "b", threads=2)   # another machine's default
    pd.testing.assert_frame_equal(metrics(tmp_path / "a"), metrics(tmp_path / "b"), check_exact=True)
    # a recorded count other than the default is used as recorded
    flemu("run", f, "--out", tmp_path / "c", "--set", "executor.threads=2", threads=1)
    assert yaml.safe_load((tmp_path / "c" / "config.yaml").read_text())["executor"]["threads"] == 2
    flemu("run", tmp_path / "c" / "config.yaml", "--out", tmp_path / "d", threads=1)
    pd.testing.assert_frame_equal(metrics(tmp_path / "c"), metrics(tmp_path / "d"), check_exact=True)
    assert not metrics(tmp_path / "a").equals(metrics(tmp_path / "c"))    # the count shows in the bits
