"""Plugins (docs/write-your-own.md): a user's algorithm in a .py file runs from the CLI named by
the scenario's `plugins:` and by `--plugin`, in a local sweep with two workers, and replays from
its config.yaml in another folder; a plugin that fails to import is exit 2 naming it; a
component registered after the schema was built is valid.

The plugin algorithm is examples/fedavgm.py with beta = 0: x - eta_g (x - avg), the same
iterates as the built-in fedavg with server_lr = eta_g, which is the number each run is held to.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import emulator
from conftest import quadratic_scenario
from registry_snapshot import registry_snapshot

ROOT = Path(__file__).resolve().parent.parent
FLEMU = [sys.executable, "-m", "emulator.cli"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny models: one thread is fastest


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def flemu(*args, cwd=None):
    """`flemu ARGS` in this process (typer's runner), in folder `cwd`."""
    from typer.testing import CliRunner

    from emulator.cli import app
    old = os.getcwd()
    os.chdir(cwd or old)
    try:
        r = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(old)
    return Result(r.exit_code, r.stdout, r.output)


def flemu_process(*args, cwd=None):
    """`flemu ARGS` in a fresh process (nothing of this one's plugins loaded)."""
    r = subprocess.run([*FLEMU, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return Result(r.returncode, r.stdout, r.stderr)


@pytest.fixture(autouse=True)
def registry_restored():
    """Each test's plugins are forgotten after it."""
    with registry_snapshot():
        yield


def plugin_scenario(tmp_path: Path, named_in_file: bool = True, name: str = "fedavgm") -> Path:
    """A scenario file in tmp/scen/ with its plugin beside it (examples/fedavgm.py, registering
    `name`)."""
    d = tmp_path / "scen"
    d.mkdir(exist_ok=True)
    (d / "my_algos.py").write_text((ROOT / "examples" / "fedavgm.py").read_text().replace('"fedavgm"', f'"{name}"'))
    sc = quadratic_scenario(rounds=6, k=3, algo=name, beta=0.0, server_lr=0.5)
    if named_in_file:
        sc["plugins"] = ["my_algos.py"]
    f = d / "scenario.yaml"
    f.write_text(yaml.safe_dump(sc))
    return f


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The built-in fedavg with server_lr 0.5: the metrics every plugin run must give."""
    sc = quadratic_scenario(rounds=6, k=3, algo="fedavg", server_lr=0.5)
    return emulator.run(sc, out=tmp_path_factory.mktemp("ref") / "run").metrics


def same_run(metrics: pd.DataFrame, reference: pd.DataFrame):
    cols = ["round", "virtual_time", "participants", "bytes_up", "bytes_down"]
    pd.testing.assert_frame_equal(metrics[cols], reference[cols])
    np.testing.assert_allclose(metrics["test_loss"], reference["test_loss"], rtol=1e-12)


@pytest.mark.parametrize("how", ["plugins:", "--plugin"])
@pytest.mark.slow
def test_cli_runs_a_plugin_algorithm_and_replays_from_elsewhere(tmp_path, reference, how):
    f = plugin_scenario(tmp_path, named_in_file=how == "plugins:")
    other = tmp_path / "elsewhere"
    other.mkdir()
    extra = [] if how == "plugins:" else ["--plugin", f.parent / "my_algos.py"]
    r = flemu("run", f, "-q", "--out", tmp_path / "runs" / "a", *extra, cwd=other)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "runs" / "a"
    same_run(pd.read_csv(run / "metrics.csv"), reference)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["plugins"] == [str((f.parent / "my_algos.py").resolve())]
    summary = json.loads((run / "summary.json").read_text())
    import hashlib
    assert summary["plugins"] == [{"plugin": cfg["plugins"][0], "file": cfg["plugins"][0],
                                   "sha256": hashlib.sha256((f.parent / "my_algos.py").read_bytes()).hexdigest()}]
    if how == "plugins:":
        return
    # the run's own config.yaml (the plugin came from the command line), run from a third
    # folder by a fresh process, reproduces metrics.csv exactly
    third = tmp_path / "third"
    third.mkdir()
    r = flemu_process("run", run / "config.yaml", "-q", "--out", tmp_path / "replay", cwd=third)
    assert r.returncode == 0, r.stderr
    a = pd.read_csv(run / "metrics.csv").drop(columns="wall_time")
    b = pd.read_csv(tmp_path / "replay" / "metrics.csv").drop(columns="wall_time")
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_validate_and_list_see_the_plugin(tmp_path):
    f = plugin_scenario(tmp_path, named_in_file=False)
    r = flemu("validate", f)
    assert r.returncode == 2 and "unknown algorithm 'fedavgm'" in r.stderr
    assert "did you mean 'fedavgm'" not in r.stderr and ", fedavgm," not in r.stderr
    r = flemu("validate", f, "--plugin", f.parent / "my_algos.py")
    assert r.returncode == 0, r.stderr
    r = flemu("list", "algorithms", "fedavgm", "--plugin", f.parent / "my_algos.py")
    assert r.returncode == 0, r.stderr
    assert "beta" in r.stdout and "server momentum beta" in r.stdout and "my_algos.py" in r.stdout
    assert "protocols: intervals, multi_model, rounds" in r.stdout


@pytest.mark.parametrize("where", ["file", "cli"])
def test_a_plugin_that_fails_to_import_is_exit_2_naming_it(tmp_path, where):
    d = tmp_path / "scen"
    d.mkdir()
    (d / "broken.py").write_text("import math\nraise RuntimeError('boom in the plugin')\n")
    sc = quadratic_scenario(rounds=2)
    if where == "file":
        sc["plugins"] = ["broken.py"]
    f = d / "s.yaml"
    f.write_text(yaml.safe_dump(sc))
    extra = ["--plugin", d / "broken.py"] if where == "cli" else []
    r = flemu("run", f, "-q", "--out", tmp_path / "out", *extra)
    assert r.returncode == 2, r.stderr
    assert "broken.py" in r.stderr and "RuntimeError: boom in the plugin" in r.stderr
    assert str(f) in r.stderr                               # the scenario that named it
    assert ("plugins[0]" if where == "file" else "--plugin") in r.stderr
    assert "broken.py:2" in r.stderr                        # where in the plugin
    assert not (tmp_path / "out").exists()
    r = flemu("validate", f, *extra)
    assert r.returncode == 2 and "broken.py" in r.stderr


def test_a_missing_plugin_file_is_exit_2(tmp_path):
    f = plugin_scenario(tmp_path)
    (f.parent / "my_algos.py").unlink()
    r = flemu("validate", f)
    assert r.returncode == 2
    assert "plugins[0]" in r.stderr and "plugin file not found" in r.stderr and "my_algos.py" in r.stderr


def test_registered_after_the_schema_was_built_is_valid(tmp_path):
    from emulator import registry
    from emulator.scenario import schema as scenario
    from emulator.api import FedAvg, FedAvgParams, register
    scenario.schema()                                        # built (and cached) first
    sc = quadratic_scenario(rounds=2, algo="late_fedavg")
    with pytest.raises(emulator.ScenarioError) as e:
        scenario.load(sc)
    assert "unknown algorithm 'late_fedavg'" in str(e.value)
    register("algorithm", "late_fedavg", FedAvgParams, "FedAvg registered late")(type("LateFedAvg", (FedAvg,), {}))
    try:
        assert scenario.load(sc).algorithm.name == "late_fedavg"
        res = emulator.run(sc, out=tmp_path / "late")
        assert res.summary["status"] == "complete" and res.summary["rounds"] == 2
    finally:
        del registry._TABLES["algorithm"]["late_fedavg"]
        registry._generation += 1
    with pytest.raises(emulator.ScenarioError):              # and gone again once unregistered
        scenario.load(sc)


def test_unknown_name_never_lists_itself():
    from emulator.scenario import schema as scenario
    from emulator.scenario.validation_errors import known_names
    S = scenario.schema()
    with pytest.raises(emulator.ScenarioError) as e:
        scenario.load(quadratic_scenario(algo="fedavgx"))
    msg = str(e.value)
    assert "did you mean 'fedavg'" in msg
    known = msg.split("known: ")[1].split(";")[0].split(", ")
    assert known == known_names(S)["algorithm"] and "fedavgx" not in known


def test_an_error_lists_the_names_its_schema_was_built_with():
    """A name registered after a schema was built is not listed by that schema's errors (it
    would refuse it); the rebuilt schema lists it."""
    from pydantic import ValidationError

    from emulator import registry
    from emulator.scenario import schema as scenario
    from emulator.api import FedAvg, FedAvgParams, register
    from emulator.scenario.validation_errors import explain
    S = scenario.schema()
    raw = quadratic_scenario(algo="fedavgx")
    with pytest.raises(ValidationError) as e:
        S.model_validate(raw)
    register("algorithm", "fedavgy", FedAvgParams, "FedAvg registered late")(type("FedAvgY", (FedAvg,), {}))
    try:
        (path, msg), = explain(e.value, raw, S)
        assert path == "algorithm.name" and "unknown algorithm 'fedavgx'" in msg and "fedavgy" not in msg
        with pytest.raises(emulator.ScenarioError, match="fedavgy"):     # the rebuilt schema knows it
            scenario.load(raw)
    finally:
        del registry._TABLES["algorithm"]["fedavgy"]
        registry._generation += 1


def test_sweep_with_two_workers_runs_plugins_named_both_ways(tmp_path, reference):
    """A sweep file whose base names the plugin algorithm (plugins: in the base) and a second
    plugin given with --plugin, two variants, -j 2."""
    f = plugin_scenario(tmp_path)
    (tmp_path / "cli_plugin").mkdir()
    src = (ROOT / "examples" / "fedavgm.py").read_text().replace('"fedavgm"', '"fedavgm_cli"')
    (tmp_path / "cli_plugin" / "other.py").write_text(src)
    sweep = {"name": "plug", "base": str(f),
             "variants": {"file": {"algorithm.name": "fedavgm"}, "cli": {"algorithm.name": "fedavgm_cli"}}}
    sf = tmp_path / "sweep.yaml"
    sf.write_text(yaml.safe_dump(sweep))
    r = flemu("sweep", sf, "-j", "2", "-q", "--out", tmp_path / "sw", "--plugin", tmp_path / "cli_plugin" / "other.py",
              cwd=tmp_path / "cli_plugin")
    assert r.returncode == 0, r.stdout + r.stderr
    idx = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert sorted(idx["status"]) == ["complete", "complete"]
    for rid in idx["run"]:
        same_run(pd.read_csv(tmp_path / "sw" / "runs" / rid / "metrics.csv"), reference)
        cfg = yaml.safe_load((tmp_path / "sw" / "runs" / rid / "config.yaml").read_text())
        assert len(cfg["plugins"]) == 2 and all(Path(p).is_absolute() for p in cfg["plugins"])


@pytest.mark.slow
def test_ray_sweep_ships_the_plugins_with_its_tasks(tmp_path, reference, monkeypatch):
    """A sweep on a real local Ray instance, one variant per way in: the base's plugins:, a
    file given on the command line, and a module (a package on the driver's path only). The
    plugin files are deleted before the tasks start, so the Ray workers (fresh processes) can
    only run them from the text shipped with each task; the module's folder goes as py_modules."""
    pytest.importorskip("ray")
    import emulator.sweep as sw
    f = plugin_scenario(tmp_path)
    (tmp_path / "cli_plugin").mkdir()
    src = (ROOT / "examples" / "fedavgm.py").read_text()
    (tmp_path / "cli_plugin" / "other.py").write_text(src.replace('"fedavgm"', '"fedavgm_cli"'))
    pkg = tmp_path / "modsite" / "ray_mod_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "algos.py").write_text(src.replace('"fedavgm"', '"fedavgm_module"'))
    monkeypatch.syspath_prepend(str(tmp_path / "modsite"))
    spec = sw.load_spec({"name": "plugray", "base": str(f), "out": str(tmp_path / "ray"),
                         "variants": {"file": {"algorithm.name": "fedavgm"}, "cli": {"algorithm.name": "fedavgm_cli"},
                                      "module": {"algorithm.name": "fedavgm_module"}}},
                        plugins=[str(tmp_path / "cli_plugin" / "other.py"), "ray_mod_pkg.algos"])
    for d in ("scen", "cli_plugin"):
        for p in (tmp_path / d).iterdir():
            p.unlink()
    res = sw.run_sweep(spec, backend="ray", workers=2, threads=1, resources={"num_cpus": 1})
    assert res.counts["complete"] == 3, res.index[["run", "status", "error"]].to_string()
    for rid in res.index["run"]:
        same_run(pd.read_csv(tmp_path / "ray" / "runs" / rid / "metrics.csv"), reference)


def test_a_selection_model_registered_late_is_valid_inside_protocol_blocks(tmp_path):
    """protocol.select is a union inside the protocol's own parameters: a selection model
    registered after a schema was built must be accepted there too (and run)."""
    from emulator.scenario import schema as scenario
    from emulator.api import Selector
    scenario.schema()

    class FirstTwo(Selector):
        def select(self, ctx):
            return sorted(ctx.available)[:2]

    register_late = __import__("emulator.api", fromlist=["register"]).register
    register_late("selection", "first_two", None, "the two lowest available ids", lambda p, ctx=None: FirstTwo())
    sc = quadratic_scenario(rounds=3)
    sc["protocol"]["select"] = {"model": "first_two"}
    res = emulator.run(sc, out=tmp_path / "sel")
    c = pd.read_csv(res.run_dir / "clients.csv")
    assert c[c["selected"]].groupby("round")["client"].apply(list).tolist() == [[0, 1]] * 3


def test_an_installed_package_is_loaded_through_the_entry_point_group(tmp_path, monkeypatch):
    """A distribution declaring `flemu.plugins` (a dist-info folder on the path, as pip writes
    it) is imported with the built-ins: its algorithm is listed and valid without --plugin;
    a broken one is exit 2 naming its entry point."""
    from emulator import plugins
    site = tmp_path / "site"
    (site / "my_methods").mkdir(parents=True)
    src = (ROOT / "examples" / "fedavgm.py").read_text().replace('"fedavgm"', '"fedavgm_installed"')
    (site / "my_methods" / "__init__.py").write_text("")
    (site / "my_methods" / "flemu_plugin.py").write_text(src)
    info = site / "my_methods-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[flemu.plugins]\nmy_methods = my_methods.flemu_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    plugins.load_entry_points()              # what registry.load_all does once per process
    r = flemu("list", "algorithms", "fedavgm_installed")
    assert r.returncode == 0, r.stderr
    assert "server momentum beta" in r.stdout and "entry point my_methods" in r.stdout
    assert emulator.load(quadratic_scenario(algo="fedavgm_installed")).algorithm.name == "fedavgm_installed"
    (site / "my_methods" / "flemu_plugin.py").write_text("raise ImportError('missing dependency xyz')\n")
    monkeypatch.delitem(sys.modules, "my_methods.flemu_plugin")
    with pytest.raises(emulator.ScenarioError) as e:
        plugins.load_entry_points()
    assert "flemu.plugins:my_methods" in str(e.value) and "missing dependency xyz" in str(e.value)


FROM_CLIENT = '''
from pydantic import Field

from emulator.api import Params, Selector, register


class FromClientParams(Params):
    first: int = Field(0, ge=0, description="the lowest client id selected")

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.first >= fleet.clients:
            out.append((f"{at}.first", f"client {self.first} is not in the fleet (clients.count is {fleet.clients})"))
        return out


class FromClient(Selector):
    def __init__(self, first):
        self.first = first

    def select(self, ctx):
        return sorted(c for c in ctx.available if c >= self.first)


register("selection", "from_client", FromClientParams, "the available clients from id `first` on",
         lambda p, ctx=None: FromClient(p.first))
'''


@pytest.mark.parametrize("protocol", ["rounds", "intervals"])
def test_a_plugin_selection_declares_its_fleet_check(tmp_path, protocol):
    """A plugin's selection params declare a check against the fleet (`fleet_problems`): under
    any protocol with a `select` block, a value outside the fleet is exit 2 naming its YAML path,
    with nothing written; a value inside it runs, selecting what the plugin says."""
    d = tmp_path / "scen"
    d.mkdir()
    (d / "from_client.py").write_text(FROM_CLIENT)
    sc = quadratic_scenario(rounds=2)
    sc["plugins"] = ["from_client.py"]
    if protocol == "intervals":
        sc["protocol"] = {"name": "intervals", "interval": 6.0, "iteration": "batch"}
    sc["protocol"]["select"] = {"model": "from_client", "first": 6}
    f = d / "s.yaml"
    f.write_text(yaml.safe_dump(sc))
    r = flemu("run", f, "-q", "--out", tmp_path / "runs" / "bad")
    assert r.returncode == 2, r.stderr
    assert "protocol.select.first: client 6 is not in the fleet (clients.count is 6)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "runs").exists()
    sc["protocol"]["select"]["first"] = 4
    f.write_text(yaml.safe_dump(sc))
    r = flemu("run", f, "-q", "--out", tmp_path / "runs" / "good")
    assert r.returncode == 0, r.stderr
    c = pd.read_csv(tmp_path / "runs" / "good" / "clients.csv")
    assert c[c["selected"]].groupby("round")["client"].apply(list).tolist() == [[4, 5]] * 2
