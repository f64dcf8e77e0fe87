"""Replays that travel (docs/reliability.md, "Replays"): a run's config.yaml records every file
it read (data, traces, plugins) by absolute path, by path from the run directory and by
SHA-256; `flemu run runs/x/config.yaml` finds them from any folder, even with the project
moved, and reproduces metrics.csv bit for bit (wall-clock columns aside); a changed data or
trace file is refused (exit 2, naming the file and both hashes, nothing written) unless
`--allow-changed-inputs`; a changed plugin is never imported unless `--trust-changed-plugins`
names it."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from registry_snapshot import registry_snapshot
from test_plugins import flemu

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLUGIN = '''
from pathlib import Path
from emulator.api import register
from emulator.algorithms.fedavg import FedAvg, FedAvgParams

Path(__file__).with_name("imported.txt").write_text("{tag}")   # proof that this text ran


@register("algorithm", "replay_avg", FedAvgParams, "fedavg under another name")
class ReplayAvg(FedAvg):
    pass
'''


@pytest.fixture(autouse=True)
def registry_restored():
    with registry_snapshot():
        yield


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def project(root: Path, plugin: bool = False) -> Path:
    """proj/sc.yaml naming data/blobs.npz and traces/steps.csv relative to itself (and a plugin)."""
    d = root / "proj"
    (d / "data").mkdir(parents=True)
    (d / "traces").mkdir()
    r = np.random.default_rng(0)
    x = r.normal(size=(120, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    np.savez(d / "data" / "blobs.npz", x_train=x[:100], y_train=y[:100], x_test=x[100:], y_test=y[100:])
    (d / "traces" / "steps.csv").write_text("client,start,step_time\n0,0,0.1\n1,0,0.25\n2,0,0.4\n3,0,0.7\n")
    sc = {"name": "rp", "seed": 3,
          "workload": {"dataset": {"name": "npz", "path": "data/blobs.npz"}, "model": {"name": "logreg"},
                       "batch_size": 8},
          "clients": {"count": 4, "groups": [{"name": "g", "fraction": 1.0,
                                              "compute": {"model": "trace", "path": "traces/steps.csv"},
                                              "network": {"latency": 0.01, "up_mbps": 1, "down_mbps": 2}}]},
          "protocol": {"name": "rounds", "local_steps": 3, "wait": {"mode": "deadline", "seconds": 1.5}},
          "algorithm": {"name": "fedavg", "lr": 0.2},
          "run": {"rounds": 3}}
    if plugin:
        (d / "algos.py").write_text(PLUGIN.format(tag="v1"))
        sc["plugins"] = ["algos.py"]
        sc["algorithm"]["name"] = "replay_avg"
    (d / "sc.yaml").write_text(yaml.safe_dump(sc))
    return d


def first_run(tmp_path, plugin=False) -> Path:
    """Run proj/sc.yaml from its folder, then move the project elsewhere: the recorded absolute
    paths are gone, the paths from the run directory still hold."""
    d = project(tmp_path, plugin)
    r = flemu("run", "sc.yaml", "-q", cwd=d)
    assert r.returncode == 0, r.stderr
    moved = tmp_path / "moved"
    shutil.move(d, moved)
    return moved


def no_wall(f: Path) -> pd.DataFrame:
    m = pd.read_csv(f, dtype=str, keep_default_na=False)
    return m[[c for c in m.columns if "wall" not in c]]


def test_config_records_every_input_file_and_the_threads(tmp_path):
    d = project(tmp_path, plugin=True)
    assert flemu("run", "sc.yaml", "-q", cwd=d).returncode == 0
    cfg = yaml.safe_load((d / "runs" / "rp" / "config.yaml").read_text())
    files = cfg["inputs"]["files"]
    assert cfg["inputs"]["folder"] == str(d)
    assert files == {
        "workload.dataset.path": {"kind": "data", "file": str(d / "data" / "blobs.npz"),
                                  "relative": "../../data/blobs.npz", "sha256": sha(d / "data" / "blobs.npz")},
        "clients.groups[0].compute.path": {"kind": "trace", "file": str(d / "traces" / "steps.csv"),
                                           "relative": "../../traces/steps.csv",
                                           "sha256": sha(d / "traces" / "steps.csv")},
        "plugins[0]": {"kind": "plugin", "file": str(d / "algos.py"), "relative": "../../algos.py",
                       "sha256": sha(d / "algos.py")}}
    assert cfg["workload"]["dataset"]["path"] == str(d / "data" / "blobs.npz")
    assert cfg["executor"]["threads"] == 1                 # the default count, written like any value


def test_a_replay_from_another_folder_reproduces_metrics_bit_for_bit(tmp_path):
    moved = first_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = flemu("run", moved / "runs" / "rp" / "config.yaml", "-q", "--out", "again", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    a, b = no_wall(moved / "runs" / "rp" / "metrics.csv"), no_wall(elsewhere / "again" / "metrics.csv")
    assert len(a) == 4 and a["test_acc"].nunique() > 1         # round 0 and 3 aggregations
    pd.testing.assert_frame_equal(a, b)
    cfg = yaml.safe_load((elsewhere / "again" / "config.yaml").read_text())
    assert cfg["inputs"]["folder"] == str(moved)        # the scenario's folder, found where it went
    assert cfg["inputs"]["files"]["workload.dataset.path"]["file"] == str(moved / "data" / "blobs.npz")
    assert cfg["inputs"]["files"]["workload.dataset.path"]["relative"] == "../../moved/data/blobs.npz"


@pytest.mark.parametrize("what", ["data", "trace"])
def test_a_changed_input_file_is_refused_unless_allowed(tmp_path, what):
    moved = first_run(tmp_path)
    if what == "data":
        f, at = moved / "data" / "blobs.npz", "workload.dataset.path"
        z = dict(np.load(f))
        z["x_train"][0, 0] += 1.0
        np.savez(f, **z)
    else:
        f, at = moved / "traces" / "steps.csv", "clients.groups[0].compute.path"
        f.write_text(f.read_text().replace("0.25", "0.3"))
    cfg = yaml.safe_load((moved / "runs" / "rp" / "config.yaml").read_text())
    recorded = cfg["inputs"]["files"][at]["sha256"]
    assert recorded != sha(f)
    r = flemu("run", moved / "runs" / "rp" / "config.yaml", "-q", "--out", tmp_path / "new")
    assert r.returncode == 2
    msg = " ".join(r.stderr.split())
    assert f"{at}: {what} file {f} changed since the run was recorded" in msg
    assert f"sha256 recorded {recorded}, now {sha(f)}" in msg and "--allow-changed-inputs" in msg
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".new*"))
    r = flemu("run", moved / "runs" / "rp" / "config.yaml", "-q", "--out", tmp_path / "new", "--allow-changed-inputs")
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load((tmp_path / "new" / "config.yaml").read_text())
    assert cfg["inputs"]["files"][at]["sha256"] == sha(f)          # the new run records what it read


def test_a_missing_input_file_is_named_with_both_places(tmp_path):
    moved = first_run(tmp_path)
    (moved / "data" / "blobs.npz").unlink()
    r = flemu("run", moved / "runs" / "rp" / "config.yaml", "-q", "--out", tmp_path / "new")
    assert r.returncode == 2 and not (tmp_path / "new").exists()
    msg = " ".join(r.stderr.split())
    assert (f"data file not found: recorded at {tmp_path / 'proj' / 'data' / 'blobs.npz'} nor at "
            f"{moved / 'data' / 'blobs.npz'} (../../data/blobs.npz from the run directory)") in msg


def test_a_changed_plugin_is_never_imported_unless_trusted(tmp_path):
    moved = first_run(tmp_path, plugin=True)
    marker = moved / "imported.txt"
    assert marker.read_text() == "v1"
    marker.unlink()
    plugin = moved / "algos.py"
    recorded = sha(plugin)
    plugin.write_text(PLUGIN.format(tag="v2"))
    config = moved / "runs" / "rp" / "config.yaml"
    r = flemu("run", config, "-q", "--out", tmp_path / "new")
    assert r.returncode == 2, r.stderr
    msg = " ".join(r.stderr.split())
    assert f"plugins[0]: plugin '{plugin}': changed since the run was recorded ({plugin})" in msg
    assert f"sha256 recorded {recorded}, now {sha(plugin)}" in msg
    assert "--trust-changed-plugins algos.py" in msg
    assert not marker.exists() and not (tmp_path / "new").exists()       # never imported, nothing written
    r = flemu("run", config, "-q", "--out", tmp_path / "new", "--trust-changed-plugins", "other.py")
    assert r.returncode == 2 and not marker.exists()
    r = flemu("run", config, "-q", "--out", tmp_path / "new", "--trust-changed-plugins", "algos.py")
    assert r.returncode == 0, r.stderr
    assert marker.read_text() == "v2"
    pd.testing.assert_frame_equal(no_wall(moved / "runs" / "rp" / "metrics.csv"),
                                  no_wall(tmp_path / "new" / "metrics.csv"))


def test_no_path_from_the_run_directory_when_only_the_root_holds_both(tmp_path):
    """A run directory far from the study (another tree): `relative` would climb to / and
    back; it is left out, so a replay relies on the absolute path (and the golden check's
    config.yaml does not depend on where the temporary folder is)."""
    from emulator.scenario import inputs, schema
    d = project(tmp_path)
    sc = schema.load(d / "sc.yaml")
    inputs.settle(sc, d / "runs" / "x")
    assert sc.inputs.files["workload.dataset.path"].relative == "../../data/blobs.npz"
    inputs.settle(sc, tmp_path / "out")                # the folder holding both: tmp_path
    assert sc.inputs.files["workload.dataset.path"].relative == "../proj/data/blobs.npz"
    inputs.settle(sc, "/x-flemu-elsewhere/run")        # only / holds both (nothing is written)
    assert sc.inputs.files["workload.dataset.path"].relative is None
    assert sc.inputs.files["workload.dataset.path"].file == str(d / "data" / "blobs.npz")


@pytest.mark.slow
def test_a_changed_module_plugin_is_found_without_importing_it_and_refused(tmp_path):
    """A module plugin (`plugins: [algos_mod]`, beside the scenario): a fresh process replaying
    the moved study finds the module's file without importing it, and refuses it changed."""
    from test_plugins import flemu_process
    d = project(tmp_path, plugin=True)
    (d / "algos.py").rename(d / "algos_mod.py")
    sc = yaml.safe_load((d / "sc.yaml").read_text())
    sc["plugins"] = ["algos_mod"]
    (d / "sc.yaml").write_text(yaml.safe_dump(sc))
    assert flemu("run", "sc.yaml", "-q", cwd=d).returncode == 0
    cfg = yaml.safe_load((d / "runs" / "rp" / "config.yaml").read_text())
    assert cfg["plugins"] == ["algos_mod"]
    assert cfg["inputs"]["files"]["plugins[0]"]["sha256"] == sha(d / "algos_mod.py")
    moved = tmp_path / "moved"
    shutil.move(d, moved)
    (moved / "imported.txt").unlink()
    (moved / "algos_mod.py").write_text(PLUGIN.format(tag="v2"))
    config = moved / "runs" / "rp" / "config.yaml"
    r = flemu_process("run", config, "-q", "--out", tmp_path / "new", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "--trust-changed-plugins algos_mod" in " ".join(r.stderr.split())
    assert not (moved / "imported.txt").exists() and not (tmp_path / "new").exists()
    r = flemu_process("run", config, "-q", "--out", tmp_path / "new", "--trust-changed-plugins", "algos_mod",
                      cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (moved / "imported.txt").read_text() == "v2"
