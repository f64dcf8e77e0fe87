"""Malformed scenarios: one clear error naming the YAML path, a non-zero exit, no run
directory. Driven through the real `flemu run` command (typer's runner, in process)."""
import copy

import pytest
import yaml
from typer.testing import CliRunner

import emulator
from emulator.cli import app
from emulator.errors import ScenarioError
from conftest import tiny

CASES = [
    # (description, mutation, YAML path expected, words expected)
    ("unknown algorithm", lambda s: s["algorithm"].update(name="fedavgg"), "algorithm.name", "did you mean 'fedavg'"),
    ("negative lr", lambda s: s["algorithm"].update(lr=-0.1), "algorithm.lr", "greater than 0"),
    ("fractions not summing to 1", lambda s: s["clients"]["groups"].append(
        {**copy.deepcopy(s["clients"]["groups"][0]), "name": "h", "fraction": 0.5}), "clients.groups", "sum to 1.5"),
    ("missing data file", lambda s: s["workload"].update(dataset={
        "name": "mnist_idx", "train_images": "nope.gz", "train_labels": "x", "test_images": "y",
        "test_labels": "z"}), "workload.dataset.train_images", "file not found"),
    ("wrong type", lambda s: s["algorithm"].update(lr="fast"), "algorithm.lr", "valid number"),
    ("unknown key", lambda s: s["algorithm"].update(lrr=0.1), "algorithm.lrr", "did you mean 'lr'"),
    ("no compute model", lambda s: s["clients"]["groups"][0].pop("compute"), "clients.groups[0].compute", "required"),
    ("negative sigma", lambda s: s["clients"]["groups"][0].update(
        compute={"model": "lognormal", "mean_step_time": 0.1, "sigma": -1}), "clients.groups[0].compute.sigma", "greater than 0"),
    ("unknown partition", lambda s: s["workload"].update(partition={"name": "dirichlett", "alpha": 1}),
     "workload.partition.name", "did you mean 'dirichlet'"),
    ("batch size zero", lambda s: s["workload"].update(batch_size=0), "workload.batch_size", "positive integer"),
    ("model does not fit the data", lambda s: s["workload"].update(model={"name": "cnn_mnist"}),
     "workload.model.name", "cnn_mnist needs image inputs"),
    ("no stopping rule", lambda s: s.update(run={"eval_every": 2}), "run", "rounds"),
    ("unknown selection model", lambda s: s["protocol"].update(select={"model": "uniformm", "k": 2}),
     "protocol.select.model", "unknown server-side selection 'uniformm'; known: all, biased, cyclic, fedcs, "
                              "oort, power_of_choice, reshuffled_cyclic, sequence, tifl, uniform; did you mean 'uniform'"),
    ("unknown compute model", lambda s: s["clients"]["groups"][0].update(compute={"model": "constnt"}),
     "clients.groups[0].compute.model", "unknown compute model 'constnt'"),
    ("more clients per round than clients", lambda s: s["protocol"].update(select={"model": "uniform", "k": 7}),
     "protocol.select.k", "7 clients per round, but clients.count is 6"),
    ("multi-model k above the fleet", lambda s: s.update(protocol={
        "name": "multi_model", "assignment": "mfa_rand", "local_steps": 2, "k": 8}),
     "protocol.k", "clients.count is 6"),
    ("a client set naming a client outside the fleet", lambda s: s["protocol"].update(
        select={"model": "sequence", "sets": [[0, 1], [2, 6]]}),
     "protocol.select.sets", "client ids must be below clients.count = 6"),
    ("a probability list of the wrong length", lambda s: s["protocol"].update(
        select={"model": "biased", "p": [0.5] * 5}),
     "protocol.select.p", "5 probabilities for clients.count = 6 clients"),
    ("first_k above the fleet", lambda s: s["protocol"].update(wait={"mode": "first_k", "k": 9}),
     "protocol.wait.k", "waits for 9 uploads, but clients.count is 6"),
    ("multi-model k not splitting into equal groups", lambda s: s.update(
        workloads=[copy.deepcopy(s["workload"]) for _ in range(2)], workload=None, protocol={
            "name": "multi_model", "assignment": "mfa_rand", "local_steps": 2, "k": 5}),
     "protocol.k", "5 clients per round do not split into 2 equal groups (one per model); "
                   "set protocol.allow_unequal_groups: true"),
    ("multi-model fleet not splitting into equal groups", lambda s: s.update(
        workloads=[copy.deepcopy(s["workload"]) for _ in range(4)], workload=None, protocol={
            "name": "multi_model", "assignment": "mfa_rr", "local_steps": 2}),
     "clients.count", "6 clients per round do not split into 4 equal groups"),
]


@pytest.mark.parametrize("desc,mutate,path,words", CASES, ids=[c[0] for c in CASES])
def test_malformed_scenario(tmp_path, desc, mutate, path, words):
    sc = tiny()
    mutate(sc)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(sc))
    out = tmp_path / "runs" / "bad"
    res = CliRunner().invoke(app, ["run", str(f), "--out", str(out), "-q"])
    assert res.exit_code == 2, res.output
    text = res.output
    assert f"{path}:" in text and words in text, text
    assert "Traceback" not in text
    assert not out.exists()
    leftovers = list((tmp_path / "runs").glob(".*")) + list((tmp_path / "runs").glob("*")) \
        if (tmp_path / "runs").exists() else []
    assert leftovers == []


def test_all_problems_reported_together():
    sc = tiny()
    sc["algorithm"]["lr"] = -1
    sc["workload"]["batch_size"] = "huge"
    sc["clients"]["groups"][0]["network"]["up_mbps"] = 0
    with pytest.raises(ScenarioError) as e:
        emulator.load(sc)
    paths = [p for p, _ in e.value.problems]
    assert {"algorithm.lr", "workload.batch_size", "clients.groups[0].network.up_mbps"} <= set(paths)


def test_overrides_are_typed():
    sc = emulator.load(tiny(), overrides=["algorithm.lr=0.25", "protocol.select.k=2", "algorithm.momentum=0.5",
                                          "run.target_accuracy=0.9", "clients.groups[0].compute.step_time=2",
                                          "workload.partition=iid", "seed=7"])
    assert sc.algorithm.lr == 0.25 and sc.protocol.select.k == 2 and sc.seed == 7
    assert sc.clients.groups[0].compute.step_time == 2.0 and sc.workload.partition.name == "iid"
    with pytest.raises(ScenarioError, match=r"--set clients.groups\[3\].name"):
        emulator.load(tiny(), overrides=["clients.groups[3].name=x"])


PROTOCOLS = {"rounds": {"name": "rounds", "local_steps": 5},
             "async": {"name": "async", "local_steps": 5},
             "intervals": {"name": "intervals", "interval": 1.0}}


@pytest.mark.parametrize("algo,protocol,supported", [
    ("dms", "rounds", "intervals"),                 # the T-SFL rules run only under intervals
    ("tsfl_optimal", "async", "intervals"),
    ("fedasync", "rounds", "async"),                # FedAsync only under async
    ("fedavg", "async", "intervals, multi_model, rounds"),   # FedAvg under rounds, intervals, multi_model, not async
])
def test_algorithm_protocol_mismatch_is_named(algo, protocol, supported):
    # not every algorithm runs under every protocol: a registered algorithm under a registered
    # protocol it does not support is one error, at algorithm.name, naming both and what it supports
    sc = tiny()
    sc["algorithm"] = {"name": algo, "lr": 0.1}
    sc["protocol"] = PROTOCOLS[protocol]
    with pytest.raises(ScenarioError) as e:
        emulator.load(sc)
    assert len(e.value.problems) == 1, e.value.problems
    path, msg = e.value.problems[0]
    assert path == "algorithm.name" and "does not run under" in msg, msg
    assert algo in msg and protocol in msg and msg.endswith(f"it supports: {supported}"), msg


@pytest.mark.parametrize("algo,protocol", [("dms", "intervals"), ("fedavg", "intervals"), ("fedasync", "async")])
def test_algorithm_protocol_pairs_that_are_supported_load(algo, protocol):
    sc = tiny()
    sc["algorithm"] = {"name": algo, "lr": 0.1}
    sc["protocol"] = PROTOCOLS[protocol]
    loaded = emulator.load(sc)
    assert (loaded.algorithm.name, loaded.protocol.name) == (algo, protocol)


def test_unknown_protocol_is_named():
    sc = tiny()
    sc["protocol"]["name"] = "roundz"
    with pytest.raises(ScenarioError, match="protocol.name: unknown protocol 'roundz'.*did you mean 'rounds'"):
        emulator.load(sc)


def test_diverging_run_stops_with_status(tmp_path):
    sc = tiny(**{"algorithm.lr": 1e9, "run.rounds": 30, "workload.model": {"name": "mlp", "hidden": 32}})
    f = tmp_path / "div.yaml"
    f.write_text(yaml.safe_dump(sc))
    res = CliRunner().invoke(app, ["run", str(f), "--out", str(tmp_path / "div"), "-q"])
    assert res.exit_code == 3, res.output
    assert "diverged at round" in res.output
    import json
    import pandas as pd
    s = json.loads((tmp_path / "div" / "summary.json").read_text())
    assert s["status"] == "diverged" and "diverged at round" in s["message"]
    m = pd.read_csv(tmp_path / "div" / "metrics.csv")
    assert 1 <= m["round"].max() < 30                      # stopped early, kept what was recorded
    import numpy as np
    assert np.isfinite(np.load(tmp_path / "div" / "model.npy")).all()   # the last finite model


def test_a_block_given_as_a_built_model_is_read_by_its_name():
    """From Python a block may be a built component model (`scenario.member`) instead of a
    mapping: the union picks its member by the component's declared name; a component of
    another kind is refused at that block's path."""
    from emulator.scenario.schema import member
    sc = tiny()
    sc["protocol"]["select"] = member("selection", "cyclic", k=2)
    loaded = emulator.load(sc)
    assert (loaded.protocol.select.model, loaded.protocol.select.k) == ("cyclic", 2)
    sc["protocol"]["select"] = member("compute", "constant", step_time=1.0)
    with pytest.raises(ScenarioError) as e:
        emulator.load(sc)
    assert [p for p, _ in e.value.problems] == ["protocol.select.model"]
    assert "unknown server-side selection 'constant'" in e.value.problems[0][1]
