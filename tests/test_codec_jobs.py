"""Encoded runs do not depend on how many runs go at once (docs/algorithms/compression.md
1.3: every draw comes from the client's keyed stream): a sweep of a QSGD run, a top-k run
with error feedback and a PowerSGD run (its Q from the model's keyed stream, 2.6) writes the same metrics.csv, bit for bit, under `-j 1` and `-j 2`, and
the executors (one job after another, a pool of job threads, stacked jobs) agree within float
tolerance."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import emulator.api as api
from emulator import sweep as sw
from conftest import tiny

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]
CODECS = {"qsgd": {"name": "qsgd", "s": 3, "bucket": 64}, "topk": {"name": "topk", "fraction": 0.05},
          "powersgd": {"name": "powersgd", "rank": 2}}


def sweep_metrics(out, workers: int) -> dict:
    spec = {"name": "enc", "base": tiny(**{"run.rounds": 4}), "out": str(out), "seeds": 1,
            "variants": {name: {"network.codec.up": up} for name, up in CODECS.items()}}
    res = sw.run_sweep(sw.load_spec(spec), workers=workers, threads=1)
    assert set(res.index["status"]) == {"complete"}, res.index
    return {r: (out / "runs" / r / "metrics.csv").read_text() for r in res.index["run"]}


def without_wall_time(text: str) -> str:
    rows = [line.split(",") for line in text.splitlines()]
    drop = rows[0].index("wall_time")
    return "\n".join(",".join(c for i, c in enumerate(row) if i != drop) for row in rows)


def test_an_encoded_sweep_is_the_same_bits_under_j1_and_j2(tmp_path):
    one, two = sweep_metrics(tmp_path / "j1", 1), sweep_metrics(tmp_path / "j2", 2)
    assert sorted(one) == sorted(two) == ["variant=powersgd__seed=0", "variant=qsgd__seed=0", "variant=topk__seed=0"]
    for run in one:
        assert without_wall_time(one[run]) == without_wall_time(two[run]), run
    assert "bytes_up_entropy" in one["variant=qsgd__seed=0"] and "codec_error" in one["variant=topk__seed=0"]
    assert "exchange_seconds" in one["variant=powersgd__seed=0"]


@pytest.mark.parametrize("name", sorted(CODECS))
def test_encoded_runs_agree_across_executors(tmp_path, name):
    out = {}
    for ex in ({"name": "sequential", "workers": 1}, {"name": "sequential", "workers": 2}, {"name": "batched"}):
        d = tmp_path / f"{ex['name']}{ex.get('workers', '')}"
        api.run(tiny(**{"run.rounds": 4, "network.codec.up": CODECS[name], "executor": ex}), out=d)
        m = pd.read_csv(d / "metrics.csv").drop(columns=["wall_time"])
        out[d.name] = (m, np.load(d / "model.npy"))
    inline, pool, stacked = out["sequential1"], out["sequential2"], out["batched"]
    for other in (pool, stacked):
        pd.testing.assert_frame_equal(other[0], inline[0], check_exact=False, rtol=1e-5, atol=1e-6)
        assert np.allclose(other[1], inline[1], atol=1e-5)
