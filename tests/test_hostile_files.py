"""Hostile files (issue 28, sections 2 and 3): broken trace CSVs, .npz arrays and FedScale
pickles are refused with one error naming the YAML path, the file and the row, and what is
allowed; every problem of a scenario and its files is reported at once; nothing is written.
The npz loader's two bugs (issue 27): 2-D feature arrays load, and `normalize: false` keeps
float features as they are."""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import struct

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from conftest import tiny
from emulator.scenario import schema as scenario
from emulator.cli import app
from emulator.errors import ScenarioError
from emulator.workloads import datasets as D

G = "clients.groups[0]"
STEP = "step_time is a finite number of seconds in [1e-06, 1e+09]"
MBPS = "is a finite number of Mbit/s in [0.001, 1e+09]"


def _tree(folder) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- trace CSVs
TRACES = [
    # (id, block, model, file text, message after "<file> ")
    ("compute inf step", "compute", "trace", "client,start,step_time\n0,0,0.1\n1,0,inf\n",
     f"row 2 (line 3): step_time inf is out of range; {STEP}"),
    ("compute short row", "compute", "trace", "client,start,step_time\n0,0\n",
     "row 1 (line 2): 3 columns expected (client, start, step_time); the row has 2"),
    ("compute header only", "compute", "trace", "client,start,step_time\n",
     "no data rows (only a header, or an empty file)"),
    ("compute nan start", "compute", "trace", "client,start,speed\n0,nan,3\n",
     "row 1 (line 2): start nan is out of range; start is a finite time in [0, 1e+09] seconds"),
    ("compute not a number", "compute", "trace", "client,start,sample_time\n0,0,fast\n",
     "row 1 (line 2): sample_time 'fast' is not a number"),
    ("links missing column", "network", "link_trace", "client,up_mbps\n0,5\n",
     "needs columns client, up_mbps, down_mbps; found client, up_mbps"),
    ("links nan", "network", "link_trace", "client,up_mbps,down_mbps\n0,nan,5\n",
     f"row 1 (line 2): up_mbps nan is out of range; up_mbps {MBPS}"),
    ("links zero", "network", "link_trace", "client,up_mbps,down_mbps\n0,5,0\n",
     f"row 1 (line 2): down_mbps 0 is out of range; down_mbps {MBPS}"),
    ("links negative", "network", "link_trace", "client,up_mbps,down_mbps\n0,5,5\n1,-2,5\n",
     f"row 2 (line 3): up_mbps -2 is out of range; up_mbps {MBPS}"),
    ("availability nan start", "availability", "trace", "client,start,end\n0,nan,5\n",
     "row 1 (line 2): start nan is out of range"),
    ("availability period -1", "availability", "trace", "client,start,end,period\n0,0,5,-1\n",
     "row 1 (line 2): period -1 is out of range; period is a finite number of seconds in [1e-06, 1e+09]"),
    ("availability never online", "availability", "trace", "client,start,end\n0,5,5\n",
     "no client is ever online (every interval is empty)"),
    ("availability interval past its period", "availability", "trace",
     "client,start,end,period\n0,0,30,100\n1,10,20,\n0,80,120,\n",
     "row 3 (line 4): client 0's interval [80, 120) ends after its period 100; the intervals of a trace "
     "that repeats lie within [0, period]"),
    ("round trace never available", "availability", "round_trace", "round,client,available\n1,0,0\n2,0,false\n",
     "no client is ever available"),
    ("round trace bad round", "availability", "round_trace", "round,client,available\n1.5,0,1\n",
     "row 1 (line 2): round '1.5' is not a round number"),
]


def _with_trace(sc, block, model, path):
    spec = {"model": model, "path": str(path)}
    if block == "network":
        spec["latency"] = 0.01
    sc["clients"]["groups"][0][block] = spec
    return sc


@pytest.mark.parametrize("block,model,text,words", [c[1:] for c in TRACES], ids=[c[0] for c in TRACES])
def test_a_broken_trace_is_one_error_naming_the_file_and_row(tmp_path, block, model, text, words):
    f = tmp_path / "trace.csv"
    f.write_text(text)
    with pytest.raises(ScenarioError) as e:
        scenario.load(_with_trace(tiny(), block, model, f))
    [(where, msg)] = e.value.problems
    assert where == f"{G}.{block}.path" and msg.startswith(f"{f} {words}" if words.startswith("row") else f"{f}: {words}"), msg


def test_two_broken_traces_and_a_bad_lr_are_reported_together_by_flemu_run(tmp_path):
    """Every problem of a scenario and its files in one error (they came one per attempt)."""
    (tmp_path / "c.csv").write_text("client,start,step_time\n0,0,inf\n")
    (tmp_path / "l.csv").write_text("client,up_mbps,down_mbps\n0,nan,5\n")
    sc = _with_trace(_with_trace(tiny(), "compute", "trace", "c.csv"), "network", "link_trace", "l.csv")
    sc["algorithm"]["lr"] = -1
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(sc))
    before = _tree(tmp_path)
    res = CliRunner().invoke(app, ["run", str(f), "--out", str(tmp_path / "run"), "-q"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    c, l = tmp_path / "c.csv", tmp_path / "l.csv"
    assert res.output.splitlines() == [
        f"{f}: 3 problems in the scenario:",
        f"  {G}.compute.path: {c} row 1 (line 2): step_time inf is out of range; {STEP}",
        f"  {G}.network.path: {l} row 1 (line 2): up_mbps nan is out of range; up_mbps {MBPS}",
        "  algorithm.lr: Input should be greater than 0 (got -1)"]
    assert _tree(tmp_path) == before and not (tmp_path / "run").exists()


def test_a_valid_trace_is_read_once_and_replayed(run_in, tmp_path):
    """The table read at validation is the one the run uses: a 0.2 s step trace gives 5 steps x
    0.2 s = 1 s of compute per client and round."""
    f = tmp_path / "c.csv"
    f.write_text("client,start,step_time\n0,0,0.2\n")
    res = run_in(_with_trace(tiny(**{"run.rounds": 1}), "compute", "trace", f))
    import pandas as pd
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert sorted(c.loc[c["steps"] > 0, "compute_time"].round(12).unique()) == [1.0]


# ---------------------------------------------------------------------------- npz arrays
def ctx():
    return D.DatasetContext(num_clients=2, rng_data=np.random.default_rng(0), rng_split=np.random.default_rng(1))


def _npz(tmp_path, normalize=True, **arrays):
    f = tmp_path / "d.npz"
    np.savez(f, **arrays)
    return D.npz(scenario.member("dataset", "npz", path=str(f), normalize=normalize), ctx()), f


RNG = np.random.default_rng(0)
X8 = RNG.integers(0, 256, (20, 8, 8), dtype=np.uint8)
Y = RNG.integers(0, 3, 20)
NPZ = [
    ("label -1", dict(y_train=np.r_[-1, Y[1:]]), "y_train holds labels from -1 to 2; labels are class numbers 0 .. 9999"),
    ("label 1e9", dict(y_train=np.r_[10 ** 9, Y[1:]]), "y_train holds labels from 0 to 1e+09"),
    ("test 10x10 vs train 8x8", dict(x_test=RNG.integers(0, 256, (5, 10, 10), dtype=np.uint8)),
     "test samples have shape (10, 10), training samples (8, 8): they must match"),
    ("empty test set", dict(x_test=X8[:0], y_test=Y[:0]), "x_test has shape (0, 8, 8); needs at least one sample"),
    ("float labels", dict(y_train=Y + 0.5), "y_train must hold whole class numbers (dtype float64)"),
    ("nan features", dict(x_train=np.where(np.arange(X8.size).reshape(X8.shape) == 7, np.nan, X8 / 255.0)),
     "x_train must hold finite numbers"),
    ("labels and samples differ", dict(y_test=Y[:4]), "4 test labels for 5 test samples"),
]


def _npz_scenario(f, **dataset):
    sc = tiny()
    sc["workload"]["dataset"] = {"name": "npz", "path": str(f), **dataset}
    return sc


def _load_and_build(sc):
    """Validate (names, shapes, dtypes, labels), then build the data (feature values)."""
    loaded = scenario.load(sc)
    D.npz(loaded.workload.dataset, ctx())


@pytest.mark.parametrize("change,words", [c[1:] for c in NPZ], ids=[c[0] for c in NPZ])
def test_a_broken_npz_is_one_error_naming_the_path(tmp_path, change, words):
    arrays = dict(x_train=X8, y_train=Y, x_test=X8[:5], y_test=Y[:5])
    arrays.update(change)
    f = tmp_path / "d.npz"
    np.savez(f, **arrays)
    with pytest.raises(ScenarioError) as e:
        _load_and_build(_npz_scenario(f))
    [(where, msg)] = e.value.problems
    assert where == "workload.dataset.path" and msg.startswith(f"{f}: {words}"), msg


def test_npz_problems_are_reported_with_the_scenario_s_other_problems(tmp_path):
    """The arrays are checked when the scenario validates (not when the run builds its data):
    a label of 1e9 and `lr: -1` are one error."""
    f = tmp_path / "d.npz"
    np.savez(f, x_train=X8, y_train=np.r_[10 ** 9, Y[1:]], x_test=X8[:5], y_test=Y[:5])
    sc = _npz_scenario(f)
    sc["algorithm"]["lr"] = -1
    with pytest.raises(ScenarioError) as e:
        scenario.load(sc)
    assert [p for p, _ in e.value.problems] == ["workload.dataset.path", "algorithm.lr"]
    assert "y_train holds labels from 0 to 1e+09" in e.value.problems[0][1]


def test_a_file_that_is_not_a_zip_is_refused(tmp_path):
    f = tmp_path / "d.npz"
    f.write_bytes(b"\x80\x04not a zip")
    with pytest.raises(ScenarioError) as e:
        scenario.load(_npz_scenario(f))
    assert e.value.problems == [("workload.dataset.path", f"cannot read {f}: not an .npz file (a zip of .npy "
                                                            "arrays, as np.savez writes)")]


def test_2d_features_load_and_normalize_false_keeps_them_as_given(tmp_path):
    """(N, D) features were an AxisError; float features above 1.5 were divided by 255."""
    x = RNG.normal(0, 100, (20, 7)).astype(np.float32)
    d, _ = _npz(tmp_path, normalize=False, x_train=x, y_train=Y, x_test=x[:5], y_test=Y[:5])
    assert d.input_shape == (7,) and np.array_equal(d.x_train, x) and np.array_equal(d.x_test, x[:5])
    d, _ = _npz(tmp_path, normalize=True, x_train=x, y_train=Y, x_test=x[:5], y_test=Y[:5])
    assert np.allclose(d.x_train.mean(0), 0, atol=1e-5) and np.allclose(d.x_train.std(0), 1, atol=1e-4)
    u, _ = _npz(tmp_path, normalize=False, x_train=X8, y_train=Y, x_test=X8[:5], y_test=Y[:5])
    assert u.x_train.max() == np.float32(X8.max() / 255.0)       # uint8 pixels: scaled to [0, 1]


def test_a_run_on_2d_npz_features_trains(run_in, tmp_path):
    """End to end: logreg on separable 2-D features from an .npz reaches 100 % test accuracy."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 200)
    x = (rng.normal(0, 1, (200, 3)) + 4.0 * y[:, None]).astype(np.float32)
    f = tmp_path / "f.npz"
    np.savez(f, x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:])
    sc = tiny(**{"run.rounds": 10, "algorithm.lr": 0.5})
    sc["workload"]["dataset"] = {"name": "npz", "path": str(f), "normalize": True}
    res = run_in(sc)
    acc = res.metrics.set_index("round")["test_acc"]
    assert res.summary["status"] == "complete" and acc[0] < 0.7
    assert acc[10] == 1.0, acc.tolist()


def test_flemu_run_refuses_a_broken_npz_with_exit_2(tmp_path):
    f = tmp_path / "d.npz"
    np.savez(f, x_train=X8, y_train=np.r_[10 ** 9, Y[1:]], x_test=X8[:5], y_test=Y[:5])
    sc = tiny()
    sc["workload"]["dataset"] = {"name": "npz", "path": str(f)}
    y = tmp_path / "bad.yaml"
    y.write_text(yaml.safe_dump(sc))
    before = _tree(tmp_path)
    res = CliRunner().invoke(app, ["run", str(y), "--out", str(tmp_path / "run"), "-q"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "workload.dataset.path" in res.output and "labels are class numbers 0 .. 9999" in res.output
    assert _tree(tmp_path) == before and not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- FedScale pickles
def _deep(n: int) -> bytes:
    return b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b"."


def _bytes8_claim() -> bytes:
    return b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"abc."


def _capacity(**rec) -> bytes:
    return pickle.dumps({1: {"computation": 10.0, "communication": 1000.0}, 2: rec})


PICKLES = [
    ("nested 200k deep", _deep(200_000), "nested more than 16 deep"),
    ("bytes8 claiming 2^40 bytes", _bytes8_claim(), "not a FedScale trace pickle"),
    ("a global", pickle.dumps(io.BytesIO), "refusing to load _io.BytesIO"),
    ("nan capacity", _capacity(computation=float("nan"), communication=5.0), "client 2 has computation nan"),
    ("inf capacity", _capacity(computation=5.0, communication=float("inf")), "client 2 has communication inf"),
    ("missing key", _capacity(computation=5.0), "client 2 has no 'communication'"),
    ("not a pickle", b"hello", "not a FedScale trace pickle"),
]


@pytest.mark.parametrize("data,words", [c[1:] for c in PICKLES], ids=[c[0] for c in PICKLES])
def test_flemu_refuses_a_hostile_fedscale_pickle_and_writes_nothing(tmp_path, data, words):
    f = tmp_path / "cap.pkl"
    f.write_bytes(data)
    out = tmp_path / "traces"
    res = CliRunner().invoke(app, ["traces", "import-fedscale", "--capacity", str(f), "--out", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and words in lines[0], lines
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["cap.pkl"]


def test_a_sound_fedscale_pickle_converts(tmp_path):
    f = tmp_path / "cap.pkl"
    f.write_bytes(_capacity(computation=20.0, communication=2000.0))
    res = CliRunner().invoke(app, ["traces", "import-fedscale", "--capacity", str(f), "--out", str(tmp_path / "t")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "t" / "compute_trace.csv").read_text().splitlines() == [
        "client,start,sample_time", "1,0,0.03", "2,0,0.06"]
    assert (tmp_path / "t" / "links.csv").read_text().splitlines() == ["client,up_mbps,down_mbps", "1,1.0,1.0",
                                                                       "2,2.0,2.0"]
