"""The boundary around user code (docs/reliability.md, "Statuses and contracts"): every row of
the table of plugin mistakes, through a real plugin file named by the scenario's `plugins:` and
the real `flemu run`: the exit status, one message naming the plugin's file, class and method,
the round and the virtual time, and the run directory kept with its status and round.

The scenario is the quadratic one (6 clients, 5 steps of 1 s, instant network): round t's
aggregation happens at exactly 5 t virtual seconds, so round 2 breaks at 10 s."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import quadratic_scenario
from registry_snapshot import registry_snapshot

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLUGIN = '''
import torch
from emulator.api import Aggregation, FedAvg, FedAvgParams, register


class NoneAggregate(FedAvg):
    def aggregate(self, t, arrivals):
        agg = super().aggregate(t, arrivals)
        return None if t == 2 else agg


class DoubleWeights(FedAvg):
    def aggregate(self, t, arrivals):
        agg = super().aggregate(t, arrivals)
        return Aggregation({c: 2 * w for c, w in agg.weights.items()}) if t == 2 else agg


class NanWeight(FedAvg):
    def aggregate(self, t, arrivals):
        agg = super().aggregate(t, arrivals)
        if t == 2:
            agg.weights[min(agg.weights)] = float("nan")
        return agg


class NanModel(FedAvg):
    def aggregate(self, t, arrivals):
        agg = super().aggregate(t, arrivals)
        if t == 2:
            self.x = torch.full_like(self.x, float("nan"))
        return agg


for name, cls in [("none_aggregate", NoneAggregate), ("double_weights", DoubleWeights),
                  ("nan_weight", NanWeight), ("nan_model", NanModel)]:
    register("algorithm", name, FedAvgParams, "a broken FedAvg (tests/test_contracts.py)", cls)
'''


@pytest.fixture(autouse=True)
def registry_restored():
    with registry_snapshot():
        yield


def scenario(tmp_path: Path, algo: str, plugin: str = PLUGIN) -> Path:
    (tmp_path / "broken_algos.py").write_text(plugin)
    sc = quadratic_scenario(rounds=3, k=3, algo=algo)
    sc["plugins"] = ["broken_algos.py"]
    f = tmp_path / "scenario.yaml"
    f.write_text(yaml.safe_dump(sc))
    return f


def flemu_run(f: Path, out: Path):
    """`flemu run F --out OUT -q` through the CLI entry (typer's runner): (exit status, output)."""
    from typer.testing import CliRunner

    from emulator.cli import app
    r = CliRunner().invoke(app, ["run", str(f), "--out", str(out), "-q"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.output


@pytest.mark.parametrize("algo, cls, what", [
    ("none_aggregate", "NoneAggregate", "returned None; aggregate returns an Aggregation"),
    ("double_weights", "DoubleWeights", "gave weights summing to 2; this algorithm's weights sum to "
                                        "weights_total = 1"),
    ("nan_weight", "NanWeight", "gave client 0 the weight nan; weights are finite and non-negative"),
])
def test_a_broken_aggregate_fails_in_its_round_by_name_and_keeps_the_run(tmp_path, algo, cls, what):
    f, out = scenario(tmp_path, algo), tmp_path / "run"
    code, text = flemu_run(f, out)
    plugin = str((tmp_path / "broken_algos.py").resolve())
    assert code == 2, text
    assert "Traceback" not in text
    assert (f"contract broken by algorithm {algo!r} (class {cls} in {plugin}).aggregate in round 2 at "
            f"virtual time 10 s: {what}") in " ".join(text.split())
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "failed" and s["rounds"] == 1 and s["invariants_checked"] == []
    assert s["error"]["round"] == 2 and s["error"]["virtual_time"] == 10.0
    assert s["error"]["component"].startswith(f"algorithm {algo!r} (class {cls} in {plugin}")
    assert s["error"]["method"] == "aggregate" and s["message"] == s["error"]["message"]
    m = pd.read_csv(out / "metrics.csv")
    assert m["round"].tolist() == [0, 1] and m["virtual_time"].tolist() == [0.0, 5.0]
    c = pd.read_csv(out / "clients.csv")
    assert set(c["round"]) == {1, 2}            # round 2's work, done before its aggregation broke, is kept
    assert (out / "config.yaml").exists()


def test_a_nan_model_is_divergence_exit_3(tmp_path):
    out = tmp_path / "run"
    code, text = flemu_run(scenario(tmp_path, "nan_model"), out)
    assert code == 3 and "diverged at round 2" in text
    assert json.loads((out / "summary.json").read_text())["status"] == "diverged"


def test_a_plugin_that_fails_at_import_is_exit_2_naming_file_and_line(tmp_path):
    out = tmp_path / "run"
    code, text = flemu_run(scenario(tmp_path, "none_aggregate", plugin="x = 1\nraise ValueError('boom')\n"), out)
    assert code == 2 and "broken_algos.py:2" in text and "ValueError: boom" in text and "plugins[0]" in text
    assert not out.exists()


def test_the_real_command_exits_2_without_a_traceback(tmp_path):
    """The same through `python -m emulator.cli` in a fresh process."""
    f, out = scenario(tmp_path, "double_weights"), tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(f), "--out", str(out), "-q"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "DoubleWeights" in r.stderr and ".aggregate in round 2" in r.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


# ------------------------------------------------------------------ every other crossing
COMPONENTS = """
import math
from dataclasses import dataclass

import numpy as np
from emulator.api import (Availability, ComputeModel, FedAvg, FedAvgParams, FixedClock, GradTransform, LocalRule,
                          LossTerm, Params, Selector, TrainFunction, register, register_step_time)


class LocalSpecNone(FedAvg):
    def local_spec(self, client, t, received):
        return None if t == 2 else super().local_spec(client, t, received)


class UploadTensor(FedAvg):
    def upload(self, client, t, result):
        return result.params if t == 2 else super().upload(client, t, result)


@dataclass(frozen=True)
class VectorTerm(LossTerm):
    def __call__(self, w, ctx):
        return 0.0 * w                         # a vector where a scalar is due


@dataclass(frozen=True)
class HalfGradient(GradTransform):
    def __call__(self, g, ctx):
        return g[: g.shape[0] // 2]


def worded_loss(module, batches, steps, ctx):
    for h in range(steps):
        batches[h]
    return "low"


class Pieces(FedAvg):
    def local_rule(self, t):
        if t != 2:
            return super().local_rule(t)
        if self.p.server_lr == 0.5:
            return LocalRule(lr=self.lr(t), terms=(VectorTerm(),))
        if self.p.server_lr == 0.25:
            return LocalRule(lr=self.lr(t), transforms=(HalfGradient(),))
        return TrainFunction(worded_loss)


class NanClock(ComputeModel):
    def __init__(self, p, ctx=None):
        pass

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        return FixedClock(float("nan") if round_ == 2 else 1.0)


class IntegerMask(Availability):
    kind = "round"

    def __init__(self, p, ctx=None):
        pass

    def online_mask(self, ids, round_, now):
        return np.ones(len(ids), dtype=int if round_ == 2 else bool)

    def online_until(self, client, now):
        return math.inf

    def next_online(self, client, now):
        return now


class Outsider(Selector):
    def select(self, ctx):
        return [int(ctx.num_clients)] if ctx.round == 2 else ctx.available.tolist()


register("algorithm", "local_spec_none", FedAvgParams, "broken", LocalSpecNone)
register("algorithm", "upload_tensor", FedAvgParams, "broken", UploadTensor)
register("algorithm", "pieces", FedAvgParams, "broken", Pieces)
register("compute", "nan_clock", Params, "broken", NanClock)
register("availability", "integer_mask", Params, "broken", IntegerMask)
register("selection", "outsider", None, "broken", lambda p, ctx=None: Outsider())
register_step_time("negative_step", lambda client, round_, rng: -1.0 if round_ == 2 else 1.0)
"""


def component_scenario(tmp_path: Path, algo="fedavg", server_lr=1.0, compute=None, availability=None,
                       select=None) -> Path:
    (tmp_path / "broken_parts.py").write_text(COMPONENTS)
    sc = quadratic_scenario(rounds=3, k=3, algo=algo, server_lr=server_lr)
    sc["plugins"] = ["broken_parts.py"]
    g = sc["clients"]["groups"][0]
    if compute:
        g["compute"] = {"model": compute}
    if availability:
        g["availability"] = {"model": availability}
    if select:
        sc["protocol"]["select"] = {"model": select}
    f = tmp_path / "scenario.yaml"
    f.write_text(yaml.safe_dump(sc))
    return f


@pytest.mark.parametrize("setup, who, method, at, what", [
    (dict(algo="local_spec_none"), "algorithm 'local_spec_none' (class LocalSpecNone", "local_spec for client 0", 5,
     "returned None; local_spec returns a LocalSpec (emulator.api)"),
    (dict(algo="upload_tensor"), "algorithm 'upload_tensor' (class UploadTensor", "upload for client 0", 5,
     "returned a lazy value (Derived); upload returns an Upload whose vectors are a list"),
    (dict(algo="pieces", server_lr=0.5), "loss term (class VectorTerm", "__call__", 10,
     "returned a torch.float64 tensor of shape (25,); a loss term returns a scalar"),
    (dict(algo="pieces", server_lr=0.25), "gradient transform (class HalfGradient", "__call__", 10,
     "returned a torch.float64 tensor of shape (12,); a gradient transform returns the gradient's shape (25,)"),
    (dict(algo="pieces", server_lr=0.75), "train function 'train_fn:worded_loss' (function worded_loss", "fn for client 0", 10,
     "returned str; a train function returns its mean training loss (a number) or None"),
    (dict(compute="nan_clock"), "compute model 'nan_clock' (class NanClock", "StepClock.time", 5,
     "gave nan; it returns a number of seconds, not NaN and not negative"),
    (dict(compute="negative_step"), "compute model 'negative_step' (function <lambda>", "fn for client 0", 5,
     "gave the step time -1.0; it must be a positive finite number of seconds"),
    (dict(availability="integer_mask"), "availability model 'integer_mask' (class IntegerMask", "online_mask", 5,
     "gave int64 values of shape (6,) for 6 clients; online_mask returns one boolean per client asked"),
    (dict(select="outsider"), "selection model 'outsider' (class Outsider", "select", 5,
     "returned [6]; a selection is distinct ids among ctx.available"),
], ids=["local_spec", "upload", "loss_term", "grad_transform", "train_fn_loss", "clock_nan", "step_time_fn",
        "online_mask", "selector"])
def test_every_crossing_fails_in_its_round_naming_the_plugin(tmp_path, setup, who, method, at, what):
    out = tmp_path / "run"
    code, text = flemu_run(component_scenario(tmp_path, **setup), out)
    text = " ".join(text.split())
    plugin = str((tmp_path / "broken_parts.py").resolve())
    assert code == 2 and "Traceback" not in text, text
    assert f"contract broken by {who} in {plugin}).{method} in round 2 at virtual time {at} s: {what}" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "failed" and s["rounds"] == 1 and s["error"]["round"] == 2
    assert s["error"]["virtual_time"] == at and s["error"]["method"] == method.split(" for client")[0]
    assert pd.read_csv(out / "metrics.csv")["round"].tolist() == [0, 1]
