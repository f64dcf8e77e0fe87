"""FedScale trace conversion (restricted unpickler), trace-driven runs, the participation
raster, and every shipped scenario validating."""
import glob
import os
import pickle
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import emulator
from emulator.cli import app

ROOT = Path(__file__).resolve().parents[1]


def write_fedscale(tmp_path):
    cap = {101: {"computation": 20.0, "communication": 5000.0},
           102: {"computation": 80.0, "communication": 1200.0}}
    beh = {101: {"duration": 500, "inactive": [100, 400], "finish_time": 500, "active": [0, 250], "model": "x"},
           102: {"duration": 500, "inactive": [300, 650], "finish_time": 500, "active": [50, 450], "model": "y"},
           103: {"duration": 500, "inactive": [700], "finish_time": 500, "active": [600], "model": "z"}}
    (tmp_path / "cap.pkl").write_bytes(pickle.dumps(cap))
    (tmp_path / "beh.pkl").write_bytes(pickle.dumps(beh))
    return cap, beh


def test_import_fedscale(tmp_path):
    write_fedscale(tmp_path)
    res = CliRunner().invoke(app, ["traces", "import-fedscale", "--capacity", str(tmp_path / "cap.pkl"),
                                   "--behaviour", str(tmp_path / "beh.pkl"), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    comp = pd.read_csv(tmp_path / "out" / "compute_trace.csv")
    assert list(comp["sample_time"]) == pytest.approx([0.06, 0.24])     # 3 x ms / 1000
    links = pd.read_csv(tmp_path / "out" / "links.csv")
    assert list(links["up_mbps"]) == [5.0, 1.2] and list(links["down_mbps"]) == [5.0, 1.2]
    av = pd.read_csv(tmp_path / "out" / "availability_trace.csv")
    # 102's [450, 650) is cut at its finish_time 500; 103's [600, 700) lies past it: never online
    assert av.values.tolist() == [[101, 0, 100, 500], [101, 250, 400, 500], [102, 50, 300, 500], [102, 450, 500, 500]]


def test_import_fedscale_never_replaces_a_file(tmp_path):
    """An existing trace file at --out is the user's data: refused (exit 2), nothing written."""
    write_fedscale(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "links.csv").write_text("client,up_mbps,down_mbps\n7,1,1\n")
    res = CliRunner().invoke(app, ["traces", "import-fedscale", "--capacity", str(tmp_path / "cap.pkl"),
                                   "--out", str(out)])
    assert res.exit_code == 2 and "links.csv" in res.output and "Traceback" not in res.output
    assert (out / "links.csv").read_text() == "client,up_mbps,down_mbps\n7,1,1\n"
    assert sorted(p.name for p in out.iterdir()) == ["links.csv"]        # compute_trace.csv not written either


def test_restricted_unpickler_refuses_objects(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({1: Evil()}))
    res = CliRunner().invoke(app, ["traces", "import-fedscale", "--capacity", str(tmp_path / "evil.pkl"),
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "refusing to load" in res.output
    assert not (tmp_path / "pwned").exists()


def test_run_driven_by_converted_traces(tmp_path, run_in):
    """Compute from the capacity trace (sample_time x batch per step), links from it, and
    availability from the behaviour trace, all in one run."""
    from devices.traces import import_fedscale
    write_fedscale(tmp_path)
    import_fedscale(tmp_path / "cap.pkl", tmp_path / "beh.pkl", tmp_path / "t")
    from conftest import tiny
    sc = tiny(**{"clients.count": 2, "protocol.select": {"model": "all"}, "run.rounds": 3,
                 "protocol.local_steps": 2, "workload.batch_size": 10})
    sc["clients"]["groups"][0].update(
        compute={"model": "trace", "path": str(tmp_path / "t" / "compute_trace.csv")},
        network={"model": "link_trace", "path": str(tmp_path / "t" / "links.csv"), "latency": 0.0},
        availability={"model": "trace", "path": str(tmp_path / "t" / "availability_trace.csv")})
    res = run_in(sc)
    c = pd.read_csv(res.run_dir / "clients.csv")
    r1 = c[c["round"] == 1].set_index("client")
    # round 1 at t = 0: client 0 (trace 101) online [0, 100); client 1 (trace 102) offline until 50
    assert bool(r1.loc[0, "available"]) and not bool(r1.loc[1, "available"])
    assert r1.loc[0, "compute_time"] == pytest.approx(2 * 10 * 0.06)
    nbytes = 650 * 4
    assert r1.loc[0, "comm_time"] == pytest.approx(2 * nbytes * 8 / 5e6)


def test_participation_raster(tmp_path, run_in):
    from analysis.plots import participation_matrix, participation_raster
    from conftest import tiny
    res = run_in(tiny(**{"run.rounds": 4}))
    c = pd.read_csv(res.run_dir / "clients.csv")
    m, rounds = participation_matrix(c)
    assert m.shape == (6, 4) and list(rounds) == [1, 2, 3, 4]
    assert ((m == 2).sum(0) == 3).all() and ((m == 1).sum(0) == 3).all()
    fig = participation_raster(res.run_dir, tmp_path / "p.png")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "round" and ax.get_ylabel() == "client"
    assert (tmp_path / "p.png").stat().st_size > 5000


@pytest.mark.parametrize("path", sorted(glob.glob(str(ROOT / "scenarios" / "**" / "*.yaml"), recursive=True)),
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_every_shipped_scenario_validates(path, tmp_path):
    import numpy as np
    import yaml
    raw = yaml.safe_load(open(path))
    if "base" in raw:        # a sweep file: every one of its runs validates
        from emulator import sweep as sw
        spec = sw.load_spec(path)
        plans = sw.resolve(spec, sw.expand(spec))
        # one run per variant x grid point x seed, each with its own id and output folder
        seeds = raw.get("seeds", 1)
        want = (len(seeds) if isinstance(seeds, list) else seeds) * max(1, len(raw.get("variants") or {}))
        for values in (raw.get("grid") or {}).values():
            want *= len(values)
        assert len(plans) == want
        assert len({p.id for p in plans}) == want and len({p.scenario["output"]["dir"] for p in plans}) == want
        return
    overrides = []
    ds = (raw.get("workload") or {}).get("dataset") or {}
    if ds.get("name") == "npz":          # a scenario for the user's own data file: a stand-in file
        f = tmp_path / "user.npz"
        rng = np.random.default_rng(0)
        np.savez(f, x_train=rng.integers(0, 255, (40, 32, 32, 3), dtype=np.uint8), y_train=np.arange(40) % 10,
                 x_test=rng.integers(0, 255, (10, 32, 32, 3), dtype=np.uint8), y_test=np.arange(10))
        overrides.append(f"workload.dataset.path={f}")
    sc = emulator.load(path, overrides)
    assert sc.name == raw["name"] and sc.seed == raw.get("seed", sc.seed)
    # what is written to config.yaml loads back to the same scenario
    from emulator.scenario import schema as scn
    assert scn.dump(scn.load(scn.to_yaml(sc))) == scn.dump(sc)
