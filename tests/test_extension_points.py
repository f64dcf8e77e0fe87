"""Extension points are abstract base classes (docs/write-your-own.md, "What each base
requires"): a class missing a required method is refused when it is registered, naming the
component, its file and the method (from the CLI: exit 2, nothing written); capabilities are
declared (a class attribute, a class keyword or a mix-in), and each declaration drives the
behaviour it names."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import yaml

from devices.clocks import StepClock
from devices.compute import RandomStepTime
from emulator import registry
from emulator.algorithms.base import Rows
from emulator.api import (Algorithm, Availability, BackgroundTraining, Callback, Codec, ComputeModel, Executor, FedAvg,
                          FixedClock, LinkModel, Params, Protocol, RegistrationError, RoundAvailability,
                          StartsAtZero, register, register_module)
from emulator.compute.batched import AutoExecutor, BatchedExecutor
from emulator.compute.executor import ClientRows, TaskData
from emulator.compute.flat import FlatModel
from emulator.errors import ScenarioError
from emulator.scenario import schema as scenario
from emulator.sim.world import World

from conftest import tiny
from registry_snapshot import registry_snapshot

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def registry_restored():
    with registry_snapshot():
        yield


def _noop(self, *a, **kw):
    return None


#: kind -> (its base, the methods a subclass must define); a class defining them all is complete
REQUIRED = {
    "algorithm": (Algorithm, ("aggregate", "local_spec", "upload")),
    "protocol": (Protocol, ("process",)),
    "executor": (Executor, ("run",)),
    "compute": (ComputeModel, ("clock",)),
    "availability": (Availability, ("next_online", "online_mask", "online_until")),
    "network": (LinkModel, ("bandwidth_bps", "transfer_times")),
    "codec": (Codec, ("encode", "wire_bytes")),
}


def test_each_base_declares_exactly_its_required_methods():
    for kind, (base, required) in REQUIRED.items():
        assert sorted(base.__abstractmethods__) == list(required), kind
    assert sorted(RoundAvailability.__abstractmethods__) == ["group_mask"]
    assert sorted(StepClock.__abstractmethods__) == ["fit", "min_step", "time"]
    assert sorted(RandomStepTime.__abstractmethods__) == ["draw"]
    # Callback: every hook optional (a plain base), so an empty subclass is a complete callback
    assert not getattr(Callback, "__abstractmethods__", None)


@pytest.mark.parametrize("kind", list(REQUIRED))
def test_a_class_missing_a_required_method_is_refused_when_registered_naming_it(kind):
    base, required = REQUIRED[kind]
    before = dict(registry.table(kind))
    for missing in required:
        cls = type(f"Lacks_{missing}", (base,), {"__module__": __name__, **{m: _noop for m in required if m != missing}})
        with pytest.raises(RegistrationError) as e:
            register(kind, f"lacks_{missing}", Params, "incomplete", cls)
        msg = str(e.value)
        assert f"{kind} 'lacks_{missing}'" in msg and f"class Lacks_{missing}" in msg and __file__ in msg
        assert f"does not define {base.__name__}.{missing} " in msg, msg    # that one method, no other
        assert registry.table(kind) == before                             # nothing registered
    both = type("LacksTwo", (base,), {})
    if len(required) > 1:
        with pytest.raises(RegistrationError, match=", ".join(f"{base.__name__}.{m}" for m in required)):
            register(kind, "lacks_all", Params, "incomplete", both)
    complete = type("Complete", (base,), {m: _noop for m in required})
    assert register(kind, "complete", Params, "complete", complete) is complete
    assert registry.get(kind, "complete").factory is complete


def test_per_round_models_and_capability_mixins_are_checked_too():
    with pytest.raises(RegistrationError, match=r"does not define RoundAvailability\.group_mask"):
        register("availability", "no_mask", Params, "", type("NoMask", (RoundAvailability,), {}))

    class Background(FedAvg, BackgroundTraining):          # declares the capability, forgets `keep`
        unfinished = "skip"

        def begin_round(self, t, selected, available): ...

        def background_spec(self, client, t, received): ...

        def forget(self, client, reason): ...
    with pytest.raises(RegistrationError, match=r"does not define BackgroundTraining\.keep "):
        register("algorithm", "background", Params, "", Background)


def test_a_class_of_another_kind_or_a_function_where_a_class_is_needed_is_refused():
    class Duck:                                         # quacks like an algorithm, extends nothing
        def local_spec(self, client, t, received): ...

        def upload(self, client, t, result): ...

        def aggregate(self, t, arrivals): ...
    with pytest.raises(RegistrationError, match="algorithm 'duck' .* does not extend Algorithm"):
        register("algorithm", "duck", Params, "", Duck)
    with pytest.raises(RegistrationError, match="register a subclass of Protocol"):
        register("protocol", "fn", Params, "", lambda world, p: None)
    for kind, (base, _) in {**REQUIRED, "callback": (Callback, ())}.items():
        with pytest.raises(RegistrationError, match=f"{kind} 'stranger' .* does not extend {base.__name__}"):
            register(kind, "stranger", Params, "", type("Stranger", (), {}))
    # device models may be functions (the built-ins are): their products are checked when built
    register("compute", "fn_compute", Params, "", lambda p, ctx=None: None)
    # callbacks: a subclass with no hook of its own is complete
    register("callback", "quiet", Params, "", type("Quiet", (Callback,), {}))


def test_a_function_factory_building_an_incomplete_class_fails_when_the_run_builds_it(tmp_path):
    class Half(ComputeModel):                            # no clock
        pass
    register("compute", "half", Params, "", lambda p, ctx=None: Half())
    sc = tiny()
    sc["clients"]["groups"][0]["compute"] = {"model": "half"}
    with pytest.raises(TypeError, match="abstract method.*clock"):
        import emulator
        emulator.run(sc, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ through the command line
BAD_PLUGIN = '''
from pydantic import Field

from emulator.api import Algorithm, LocalRule, LocalSpec, Params, Upload, register


class NoAggregateParams(Params):
    lr: float = Field(0.1, gt=0)


class NoAggregate(Algorithm):
    def local_spec(self, client, t, received):
        return LocalSpec(start=received.vectors[0], rule=LocalRule(lr=self.p.lr))

    def upload(self, client, t, result):
        return Upload([result.params], result=result)


register("algorithm", "no_aggregate", NoAggregateParams, "an algorithm without aggregate", NoAggregate)
'''


def _flemu(args, cwd):
    return subprocess.run([sys.executable, "-m", "emulator.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_a_plugin_missing_aggregate_is_exit_2_from_validate_and_run_naming_it_and_writes_nothing(tmp_path):
    plugin = tmp_path / "bad_algos.py"
    plugin.write_text(BAD_PLUGIN)
    sc = tiny(**{"algorithm": {"name": "no_aggregate", "lr": 0.1}})
    (tmp_path / "named.yaml").write_text(yaml.safe_dump({**sc, "plugins": ["bad_algos.py"]}))
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(sc))
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, at in ((["validate", "named.yaml"], "plugins[0]"),
                     (["run", "named.yaml", "--out", "out", "-q"], "plugins[0]"),
                     (["validate", "plain.yaml", "--plugin", "bad_algos.py"], "--plugin bad_algos.py"),
                     (["run", "plain.yaml", "--plugin", "bad_algos.py", "--out", "out", "-q"], "--plugin bad_algos.py")):
        r = _flemu(args, tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert f"{at}: plugin 'bad_algos.py': algorithm 'no_aggregate' (class NoAggregate in {plugin})" in r.stderr
        assert "does not define Algorithm.aggregate " in r.stderr and f"(at {plugin}:19)" in r.stderr, r.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == before, args   # no run directory, no runs/


# ------------------------------------------------------------------ declared capabilities
class PerPeriodParams(Params):
    tau: int = 3
    period: float = 1.0


class PerPeriod(ComputeModel):
    """A user's T-SFL-style model: `tau` iterations per `period`, declared as iterations."""

    counts_iterations = True

    def __init__(self, p, ctx=None):
        self.p = p

    def clock(self, client, round_, rng, now=0.0, work=None, draw=None):
        return FixedClock(self.p.period / self.p.tau)


class PerPeriodAsSteps(PerPeriod):
    counts_iterations = False                   # the same clock, read as SGD steps


def _intervals(compute: dict) -> dict:
    sc = tiny(**{"protocol": {"name": "intervals", "interval": 1.0, "iteration": "epoch"},
                 "algorithm": {"name": "fedavg", "lr": 0.1}})
    sc["clients"]["groups"] = [{"name": "g", "fraction": 1.0, "compute": compute, "network": "instant"}]
    return sc


def test_a_compute_model_declaring_counts_iterations_gives_tau_directly_under_intervals():
    register("compute", "per_period", PerPeriodParams, "tau iterations per period", PerPeriod)
    register("compute", "per_period_steps", PerPeriodParams, "the same clock as steps", PerPeriodAsSteps)

    def clients(compute):
        w = World(scenario.load(_intervals(compute)))
        w.run()
        return w.recorder.clients_frame(), w
    c, w = clients({"model": "per_period", "tau": 3, "period": 1.0})
    chosen = c[c["selected"]]
    spi = np.ceil(w.tasks[0].client_sizes[chosen["client"].to_numpy()] / 16).astype(int)      # B = 16
    assert (chosen["steps"] == 3).all() and (chosen["sgd_steps"].to_numpy() == 3 * spi).all()
    builtin, _ = clients({"model": "iterations", "fixed": 3, "period": 1.0})
    assert builtin["steps"].tolist() == c["steps"].tolist()              # the built-in, by declaration too
    assert builtin["sgd_steps"].tolist() == c["sgd_steps"].tolist()
    # undeclared, 3 clock steps are 3 SGD steps: not one whole epoch (spi > 3), so tau = 0
    assert (spi > 3).all()
    steps, _ = clients({"model": "per_period_steps", "tau": 3, "period": 1.0})
    assert (steps[steps["selected"]]["steps"] == 0).all()


class ZeroLinear(StartsAtZero, nn.Sequential):
    def __init__(self, d, c):
        super().__init__(nn.Flatten(), nn.Linear(d, c))


def test_a_model_declaring_starts_at_zero_starts_at_zero_under_multi_model_init_auto():
    register_module("zero_linear", lambda ctx: ZeroLinear(int(np.prod(ctx.input_shape)), ctx.num_classes))
    register_module("plain_linear", lambda ctx: nn.Sequential(nn.Flatten(),
                                                              nn.Linear(int(np.prod(ctx.input_shape)), ctx.num_classes)))
    sc = tiny()
    wl = sc.pop("workload")
    sc["workloads"] = [dict(wl, model={"name": n}) for n in ("zero_linear", "plain_linear", "logreg")]
    sc["protocol"] = {"name": "multi_model", "assignment": "mfa_rr", "local_steps": 1}
    w = World(scenario.load(sc))
    zero, plain, logreg = (t.algorithm.global_params() for t in w.tasks)
    assert not zero.any() and not logreg.any() and bool(plain.abs().min() > 0)
    sc["protocol"]["init"] = "framework"
    w = World(scenario.load(sc))
    assert all(bool(t.algorithm.global_params().any()) for t in w.tasks)


def test_cohort_path_is_declared_per_class_and_the_default_aggregate_rows_is_aggregate():
    class Mine(FedAvg, cohort_path=True):
        pass

    class Below(Mine):
        pass
    assert Mine.cohort_path and not Below.cohort_path
    w = World(scenario.load(tiny()))
    algo = w.tasks[0].algorithm
    rng = np.random.default_rng(0)
    rows = Rows(clients=np.array([4, 1, 2]), n_samples=np.array([30, 10, 20]), steps=np.array([5, 5, 3]),
                params=[algo.x + torch.as_tensor(rng.normal(size=algo.x.shape), dtype=algo.x.dtype) for _ in range(3)],
                train_loss=np.array([0.5, 0.25, 0.125]))
    x0 = algo.x.clone()
    fast = algo.aggregate_rows(1, rows)                  # FedAvg's columns
    x_fast = algo.x
    algo.x = x0
    slow = Algorithm.aggregate_rows(algo, 1, rows)       # the default: `aggregate` of the rows' Arrivals
    assert torch.equal(algo.x, x_fast) and slow.weights == fast.weights == pytest.approx({4: 0.5, 1: 1 / 6, 2: 1 / 3})
    assert [(a.client, a.round, a.n_samples, a.steps, a.train_loss) for a in rows.arrivals(1)] == \
        [(4, 1, 30, 5, 0.5), (1, 1, 10, 5, 0.25), (2, 1, 20, 3, 0.125)]


def _bn_tasks():
    net = FlatModel(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)), torch.device("cpu"), torch.float32)
    assert net.has_buffers
    return {0: TaskData(net, torch.zeros(4, 4), torch.zeros(4, dtype=torch.long),
                        ClientRows([np.arange(4)], torch.device("cpu")))}


def test_stacking_every_job_is_declared_and_inherited_by_a_subclass_of_another_name():
    class MyBatched(BatchedExecutor):
        name = "my_batched"
    assert BatchedExecutor.stacks_all and MyBatched.stacks_all and not AutoExecutor.stacks_all
    for cls in (BatchedExecutor, MyBatched):
        with pytest.raises(ScenarioError, match="cannot stack models with BatchNorm"):
            cls(_bn_tasks(), None, torch.device("cpu"))
    AutoExecutor(_bn_tasks(), None, torch.device("cpu"))            # runs their jobs on the loop


class EvenRounds(RoundAvailability):
    """Per round: even clients online in even rounds, odd clients in odd rounds."""

    def __init__(self, p=None, ctx=None):
        pass

    def group_mask(self, round_):
        return self.members % 2 == round_ % 2


def test_a_per_round_model_defines_only_its_group_mask():
    register("availability", "even_rounds", Params, "parity of client and round", EvenRounds)
    sc = tiny(**{"protocol.select": {"model": "all"}})
    sc["clients"]["groups"][0]["availability"] = {"model": "even_rounds"}
    w = World(scenario.load(sc))
    w.run()
    c = w.recorder.clients_frame()
    assert c.groupby("round")["available"].apply(lambda a: list(np.flatnonzero(a.to_numpy()))).to_dict() == \
        {1: [1, 3, 5], 2: [0, 2, 4], 3: [1, 3, 5]}
