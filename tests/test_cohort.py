"""The cohort path of the vector engine (docs/architecture.md section 3): where an algorithm's client side
depends on no client (`Algorithm.cohort_spec`: FedAvg, FedProx), a round's arrivals go to the
executor as one CohortJob and to the algorithm as stacked rows (`aggregate_rows`), with no
object per participant. It must give exactly what the client-by-client path gives: the same
records, the same model, the same jobs counted and computed (late clients never computed)."""
import numpy as np
import pandas as pd
import pytest
import torch

from emulator.scenario import schema as scenario
from emulator.algorithms.fedavg import FedAvg
from emulator.compute.jobs import CohortJob, LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import resolve
from emulator.sim.recorder import RoundLog
from emulator.sim.world import World

from conftest import tiny


def deadline_scenario(algo="fedavg", executor="sequential", **algo_kw):
    """Two device groups, a deadline that the slow group's clients often miss (late drops)."""
    sc = tiny(**{"run.rounds": 4, "clients.count": 10, "protocol.select": {"model": "uniform", "k": 7},
                 "protocol.wait": {"mode": "deadline", "seconds": 0.9}, "protocol.engine": "vector",
                 "algorithm": {"name": algo, "lr": 0.1, **algo_kw}, "executor": {"name": executor}})
    sc["workload"]["partition"] = {"name": "dirichlet", "alpha": 0.5}      # unequal weights
    g = sc["clients"]["groups"][0]
    g.pop("fraction")
    sc["clients"]["groups"] = [
        dict(g, name="fast", count=5, compute={"model": "lognormal", "mean_step_time": 0.1, "sigma": 0.5},
             network={"latency": 0.01, "up_mbps": 2, "down_mbps": 5, "jitter": 0.05, "spread": 0.5}),
        dict(g, name="slow", count=5, compute={"model": "lognormal", "mean_step_time": 0.2, "sigma": 0.5},
             network={"latency": 0.03, "up_mbps": 1, "down_mbps": 3})]
    return sc


def run(sc, cohort: bool, monkeypatch, engine="vector"):
    """A finished world, with the cohort path on or off (off: FedAvg asks client by client)."""
    import emulator.algorithms.fedavg as fedavg_module
    calls = {"local_spec": 0}

    def counting(*a, **kw):            # every LocalSpec FedAvg (and its subclasses) make
        calls["local_spec"] += 1
        return LocalSpec(*a, **kw)
    with monkeypatch.context() as m:
        m.setattr(fedavg_module, "LocalSpec", counting)
        if not cohort:
            m.setattr(FedAvg, "cohort_spec", lambda self, t, received: None)
        w = World(scenario.load(dict(sc, protocol=dict(sc["protocol"], engine=engine))))
        w.run()
    assert w.status == "complete" and w.protocol.engine == engine
    return w, calls["local_spec"]


@pytest.mark.parametrize("algo, kw, executor, engine", [
    ("fedavg", {}, "sequential", "vector"), ("fedprox", {"mu": 0.1}, "sequential", "vector"),
    ("fedavg", {"server_lr": 0.5, "weighting": "uniform"}, "batched", "vector"),
    ("fedavg", {}, "sequential", "process"), ("fedprox", {"mu": 0.1}, "batched", "process")])
def test_cohort_path_gives_exactly_the_client_by_client_results(algo, kw, executor, engine, monkeypatch):
    sc = deadline_scenario(algo, executor, **kw)
    wc, spec_calls = run(sc, True, monkeypatch, engine)
    wp, per_client_calls = run(sc, False, monkeypatch, engine)
    assert spec_calls == 4                        # one spec a round ...
    assert per_client_calls > 4 * 4               # ... against one per participant that started computing
    mc, mp = wc.recorder.metrics_frame(), wp.recorder.metrics_frame()
    pd.testing.assert_frame_equal(mc.drop(columns=["wall_time"]), mp.drop(columns=["wall_time"]), check_exact=True)
    pd.testing.assert_frame_equal(wc.recorder.clients_frame(), wp.recorder.clients_frame(), check_exact=True)
    assert torch.equal(wc.tasks[0].algorithm.x, wp.tasks[0].algorithm.x)
    c = wc.recorder.clients_frame()
    late = c[c["dropped"]]
    assert len(late) > 0 and (late["steps"] > 0).any()     # late clients that had started computing
    # the same jobs counted (late ones included) and computed (late ones never)
    assert wc.executor.stats == wp.executor.stats
    arrived = c[c["selected"] & ~c["dropped"]]
    assert wc.executor.stats.steps_computed == int(arrived["steps"].sum())
    assert wc.executor.stats.steps_submitted > wc.executor.stats.steps_computed


def test_cohort_engine_agrees_with_the_process_engine(tmp_path):
    sc = deadline_scenario()
    out = {}
    for engine in ("process", "vector"):
        w = World(scenario.load(dict(sc, protocol=dict(sc["protocol"], engine=engine))))
        w.run()
        out[engine] = (w.recorder.metrics_frame().drop(columns=["wall_time"]), w.recorder.clients_frame(),
                       w.tasks[0].algorithm.x, w.executor.stats)
    (mp, cp, xp, sp), (mv, cv, xv, sv) = out["process"], out["vector"]
    pd.testing.assert_frame_equal(mp, mv, check_exact=True)
    pd.testing.assert_frame_equal(cp, cv, check_exact=True)
    assert torch.equal(xp, xv) and sp == sv


def test_only_algorithms_whose_client_side_is_fedavgs_form_cohorts():
    def algo(name, **kw):
        sc = tiny(**{"algorithm": {"name": name, "lr": 0.1, **kw}})
        return World(scenario.load(sc)).tasks[0].algorithm
    for name, kw in (("fedavg", {}), ("fedprox", {"mu": 0.1}), ("fedavg_active", {})):
        a = algo(name, **kw)
        assert a.cohort_spec(1, a.broadcast(1)) is not None, name
    for name in ("scaffold", "fedumf", "mifa"):
        a = algo(name)
        assert a.cohort_spec(1, a.broadcast(1)) is None, name

    class Personal(FedAvg):            # a client-dependent start: must go client by client
        def local_spec(self, client, t, received):
            return LocalSpec(start=received.vectors[0] + client, rule=self.local_rule(t))
    p = algo("fedavg")
    p.__class__ = Personal
    assert p.cohort_spec(1, p.broadcast(1)) is None
    class OwnAggregate(FedAvg):        # a subclass's own aggregation is honoured too
        def aggregate(self, t, arrivals):
            return super().aggregate(t, arrivals)
    a = algo("fedavg")
    a.__class__ = OwnAggregate
    assert not OwnAggregate.cohort_path and a.cohort_spec(1, a.broadcast(1)) is None

    class Declared(OwnAggregate, cohort_path=True):   # ... unless the subclass declares it again
        pass

    class Below(Declared):             # not inherited: each class that keeps the promise says so
        pass
    assert Declared.cohort_path and not OwnAggregate.cohort_path and FedAvg.cohort_path and not Below.cohort_path


@pytest.mark.parametrize("executor", ["sequential", "batched", "auto"])
def test_a_cohort_job_is_its_clients_jobs(executor):
    """Row i of a cohort's result is what the TrainJob of its client gives, on each executor."""
    sc = tiny(**{"executor": {"name": executor}})
    w = World(scenario.load(sc))
    ex, x = w.executor, w.tasks[0].algorithm.x
    spec = LocalSpec(start=x, rule=LocalRule(lr=0.1, momentum=0.5))
    clients, steps = np.array([4, 0, 2]), np.array([3, 5, 0])
    fut = ex.submit_cohort(CohortJob(0, clients, 2, steps, spec, 16))
    singles = [ex.submit(TrainJob(0, int(c), 2, int(k), spec, 16)) for c, k in zip(clients, steps)]
    resolve([fut] + singles)          # one level: a batched executor stacks all six jobs
    res = fut.value()
    assert len(res.params) == 3 and res.params[0].shape == x.shape
    for i, s in enumerate(singles):
        r = s.value()
        if executor == "batched":     # stacked rows: float noise of vmap against a lone job
            torch.testing.assert_close(res.params[i], r.params, rtol=1e-5, atol=1e-7)
        else:
            assert torch.equal(res.params[i], r.params)
        assert res.steps[i] == r.steps and (res.loss_mean[i] == r.loss_mean or np.isnan(r.loss_mean))
    assert not torch.equal(res.params[0], res.params[1])   # clients train on their own data
    assert torch.equal(res.params[2], x)                      # 0 steps: the start
    assert ex.stats.jobs_submitted == 6 and ex.stats.steps_submitted == 16


def test_round_log_positions_in_any_order():
    log = RoundLog(1, 100, ids=[40, 7, 93, 12])
    assert log.positions([93, 7, 12, 40, 7]).tolist() == [2, 1, 3, 0, 1]
    assert [log.at(c) for c in (40, 7, 93, 12)] == [0, 1, 2, 3]
    for missing in ([8], [94], [7, 41]):
        with pytest.raises(KeyError):
            log.positions(missing)
    assert RoundLog(1, 5).positions([3, 1]).tolist() == [3, 1]     # dense: the id itself


def test_a_run_cut_mid_round_counts_the_started_jobs_alike(monkeypatch):
    """run.virtual_time ends a round part-way: the clients that had started computing are
    counted as submitted jobs by the process engine's cohort path as by the client-by-client
    path and the vector engine (summary.json jobs_submitted / grad_steps)."""
    sc = deadline_scenario()
    sc["run"] = {"virtual_time": 2.3}
    stats = {}
    for engine in ("process", "vector"):
        for cohort in (True, False):
            w, _ = run(sc, cohort, monkeypatch, engine)
            stats[engine, cohort] = w.executor.stats
    assert stats["process", True].jobs_submitted > stats["process", True].jobs_computed > 0
    assert len({(s.jobs_submitted, s.steps_submitted, s.jobs_computed, s.steps_computed)
                for s in stats.values()}) == 1


def test_a_frozen_run_does_not_keep_an_earlier_world_alive(monkeypatch):
    """World.run takes a large fleet's world out of the cyclic GC's passes (gc.freeze); the
    garbage of an earlier run in the same process (a World is full of reference cycles) is
    collected first, not frozen with it for the whole run (sweeps on Ray workers, library use)."""
    import gc
    import weakref
    import emulator.sim.world as world_module
    monkeypatch.setattr(world_module, "FREEZE_FROM", 1)
    a = World(scenario.load(tiny(**{"run.rounds": 2})))
    a.run()
    gone = weakref.ref(a)
    b = World(scenario.load(tiny(**{"run.rounds": 2})))
    seen = []
    b.progress = lambda row: row["round"] >= 1 and (gc.collect(), seen.append(gone() is None))
    gc.disable()                       # the earlier world becomes garbage, not yet collected
    try:
        del a
        assert gone() is not None
        b.run()
    finally:
        gc.enable()
    assert seen and all(seen)          # collected before the freeze, so gone during b's run
    assert gc.get_freeze_count() == 0  # and nothing is left frozen after it
