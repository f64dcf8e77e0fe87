"""Selectors in real runs (docs/selection.md): the history grows with participants only; the
process and vector engines give identical records under Oort; over-selection feeds Oort its
stragglers; power-of-choice's probe is real compute charged in virtual time and its equal
weights reach the aggregation; the scenario checks refuse what a selector cannot have
(fedcs without a deadline: exit 2, nothing written); a plugin's broken selection is a
ContractError naming it; a plugin selector from emulator.api runs in a local sweep."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml

import emulator
from devices.selectors import History, RoundOutcomes, Status
from emulator.errors import ContractError, ScenarioError
from emulator.scenario.schema import load
from emulator.sim.world import World

from conftest import tiny
from registry_snapshot import registry_snapshot

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def two_speed(n=12, rounds=6, **over) -> dict:
    """tiny on n clients: half fast (0.1 s/step, 10 Mbit/s), half slow (1 s/step, 1 Mbit/s)."""
    sc = tiny(**{"clients.count": n, "run.rounds": rounds, **over})
    sc["clients"]["groups"] = [
        {"name": "fast", "fraction": 0.5, "compute": {"model": "constant", "step_time": 0.1},
         "network": {"latency": 0.01, "up_mbps": 10, "down_mbps": 10}},
        {"name": "slow", "fraction": 0.5, "compute": {"model": "constant", "step_time": 1.0},
         "network": {"latency": 0.01, "up_mbps": 1, "down_mbps": 1}}]
    return sc


def world_run(sc) -> World:
    w = World(load(sc))
    w.run()
    return w


def frames(run_dir: Path) -> tuple:
    m = pd.read_csv(run_dir / "metrics.csv")
    m = m[[c for c in m.columns if "wall" not in c]]
    return m, pd.read_csv(run_dir / "clients.csv")


# ----------------------------------------------------------------------------- history memory
def outcomes(ids, r=1) -> RoundOutcomes:
    n = len(ids)
    nan = np.full(n, np.nan)
    return RoundOutcomes(round=r, ids=np.asarray(ids), status=np.zeros(n, np.int8), t_down=nan, t_comp=nan,
                         t_up=nan, total=np.ones(n), met_deadline=np.ones(n, bool), cut=np.zeros(n, bool),
                         loss_n=np.ones(n), loss_sum=np.ones(n), loss_sq=np.ones(n), unique=np.ones(n, np.int64),
                         last_n=np.ones(n), last_sq=nan, ema_sq=nan)


def test_history_memory_grows_with_participants_not_with_the_fleet():
    """The same 1,000 participants drawn from a fleet of 10^3 or of 10^8 ids hold the same
    bytes; twice the participants, twice the bytes; nothing before anyone took part."""
    rng = np.random.default_rng(0)
    small, huge = History(), History()
    for r in range(10):
        small.record(outcomes(np.arange(100 * r, 100 * (r + 1)), r + 1))
        huge.record(outcomes(np.sort(rng.choice(10 ** 8, 100, replace=False)), r + 1))
    assert small.n == huge.n == 1000 and small.nbytes == huge.nbytes
    assert History().nbytes <= 64
    double = History()
    double.record(outcomes(np.arange(2000)))
    one = History()
    one.record(outcomes(np.arange(1000)))
    assert double.nbytes / one.nbytes == pytest.approx(2.0, rel=0.05)
    assert one.nbytes / 1000 < 200                      # bytes per participant


def test_history_of_a_run_holds_exactly_who_took_part():
    w = world_run(two_speed(n=400, rounds=4, **{"protocol.select": {"model": "oort", "k": 3}}))
    took = {c for log in w.recorder.rounds for c in log.clients()[log.selected].tolist()}
    h = w.protocol.selecting.history
    assert set(h.ids.tolist()) == took and h.n == len(took) <= 12
    assert h.get("count", sorted(took)).sum() == sum(int(log.selected.sum()) for log in w.recorder.rounds)
    last = {}                                  # what each client's last round recorded in clients.csv
    for log in w.recorder.rounds:
        for i in np.flatnonzero(log.selected):
            last[int(log.clients()[i])] = (log.round, log.comm_time[i], log.compute_time[i], log.weight[i] > 0)
    for c, (r, comm, comp, agg) in last.items():
        assert h.get("round", [c])[0] == r
        assert (h.get("status", [c])[0] == Status.AGGREGATED) == agg
        assert h.get("t_down", [c])[0] + h.get("t_up", [c])[0] == pytest.approx(comm, rel=1e-12)
        assert h.get("t_comp", [c])[0] == pytest.approx(comp, rel=1e-12)
        assert h.get("loss_n", [c])[0] > 0 and h.get("unique", [c])[0] > 0


def test_client_columns_find_clients_written_in_any_order():
    from devices.selectors import ClientColumns
    c = ClientColumns({"x": (np.float64, -1.0)})
    c.put("x", [5, 2, 9], [50.0, 20.0, 90.0])
    c.put("x", [1, 7], [10.0, 70.0])
    c.add("x", [9, 1], [1.0, 1.0])
    assert c.get("x", [1, 2, 3, 5, 7, 9]).tolist() == [11.0, 20.0, -1.0, 50.0, 70.0, 91.0]
    assert c.get("x", [1, 2, 5, 7, 9]).tolist() == [11.0, 20.0, 50.0, 70.0, 91.0]     # every client, in id order
    assert c.ids.tolist() == [2, 5, 9, 1, 7] and c.n == 5


# ----------------------------------------------------------------------------- engines
@pytest.mark.parametrize("wait", [{"mode": "deadline", "seconds": 3.0}, {"mode": "first_k", "k": 3}])
def test_process_and_vector_engines_give_identical_records_with_oort(tmp_path, wait):
    runs = {}
    for engine in ("process", "vector"):
        sc = two_speed(rounds=8, **{"protocol.select": {"model": "oort", "k": 4}, "protocol.wait": wait,
                                    "protocol.engine": engine})
        runs[engine] = frames(emulator.run(sc, out=tmp_path / engine).run_dir)
    (mp, cp), (mv, cv) = runs["process"], runs["vector"]
    pd.testing.assert_frame_equal(mp, mv)
    pd.testing.assert_frame_equal(cp, cv)
    assert cp["dropped"].any()            # stragglers happened (cut by the deadline or the first k)


def test_over_selection_feeds_oort_its_stragglers():
    """select 4, wait for the first 3: the fourth is cut ('late') and reaches Oort as a
    straggler whose duration is its full (estimated) one, not the close."""
    w = world_run(two_speed(rounds=1, **{"protocol.select": {"model": "oort", "k": 4},
                                         "protocol.wait": {"mode": "first_k", "k": 3}}))
    h = w.protocol.selecting.history
    late = [(log.round, int(log.clients()[i])) for log in w.recorder.rounds
            for i, r in log.drop_reason.items() if r == "late"]
    assert late
    st = w.protocol.selector.state
    for _, c in late:
        assert h.get("status", [c])[0] == Status.STRAGGLER and h.get("cut", [c])[0]
        assert st.get("count", [c])[0] == 1                   # it gave feedback: explored
        assert st.get("duration", [c])[0] == h.get("total", [c])[0]
        assert not math.isnan(h.get("total", [c])[0])


# ----------------------------------------------------------------------------- power-of-choice
def test_power_of_choice_probe_is_real_compute_charged_before_the_round():
    """d = every client: the probe's phase is max_i (model download + ceil(n_i / B) steps +
    one number's upload); the k highest losses of the initial model are selected in round 1;
    the round lasts the probe plus its participants; equal weights 1/k reach clients.csv."""
    sc = two_speed(rounds=2, **{"protocol.select": {"model": "power_of_choice", "k": 3, "d": 12},
                                "workload.partition": {"name": "lognormal", "sigma": 0.5, "min_size": 20}})
    w = world_run(sc)
    task = w.tasks[0]
    m = w.recorder.metrics_frame()
    net = task.net
    x0 = net.initial_vector()
    losses = []
    for c in range(12):
        rows = w.executor.tasks[0].client_rows[c]
        out = net.forward(x0, w.executor.tasks[0].x[rows])
        losses.append(float(F.cross_entropy(out, w.executor.tasks[0].y[rows])))
    first = m[m["round"] == 1].iloc[0]
    top3 = sorted(np.argsort(-np.array(losses), kind="stable")[:3].tolist())
    log1 = next(log for log in w.recorder.rounds if log.round == 1)
    assert sorted(log1.clients()[log1.selected].tolist()) == top3
    sizes = task.client_sizes
    (_, nb_down), _ = w.protocol.messages(task)
    nb_one = w.network.message_bytes(1, "up")
    fast = np.arange(12) < 6
    step = np.where(fast, 0.1, 1.0)
    mbps = np.where(fast, 10.0, 1.0)
    t = (0.01 + nb_down * 8 / (mbps * 1e6)) + np.ceil(sizes / 16) * step + (0.01 + nb_one * 8 / (mbps * 1e6))
    assert first["probe_time"] == pytest.approx(t.max(), rel=1e-12) and first["probed"] == 12
    part = log1.comm_time[log1.selected] + log1.compute_time[log1.selected]
    assert first["round_time"] == pytest.approx(first["probe_time"] + part.max(), rel=1e-12)
    assert (log1.weight[log1.selected] == 1 / 3).all()
    assert len(set(sizes[log1.selected].tolist())) > 1        # not what n_i / sum n would give


def test_selection_weights_need_an_algorithm_that_declares_them():
    sc = two_speed(**{"protocol.select": {"model": "power_of_choice", "k": 2}, "algorithm": {"name": "scaffold", "lr": 0.1}})
    with pytest.raises(ScenarioError) as e:
        load(sc)
    assert "protocol.select.weights" in str(e.value)
    load(two_speed(**{"protocol.select": {"model": "power_of_choice", "k": 2, "weights": "samples"},
                      "algorithm": {"name": "scaffold", "lr": 0.1}}))


def test_probing_is_refused_under_intervals_and_rpow_runs_there():
    sc = two_speed(**{"protocol": {"name": "intervals", "interval": 6.0, "iteration": "batch",
                                   "select": {"model": "power_of_choice", "k": 2}}})
    with pytest.raises(ScenarioError) as e:
        load(sc)
    assert "protocol.select.variant" in str(e.value)
    sc["protocol"]["select"]["variant"] = "rpow_d"
    w = world_run(sc)
    assert w.protocol.selecting.history.n > 0


# ----------------------------------------------------------------------------- fedcs and checks
@pytest.mark.slow
def test_fedcs_without_a_deadline_exits_2_and_writes_nothing(tmp_path):
    sc = two_speed(**{"protocol.select": {"model": "fedcs", "fraction_candidates": 1.0}})
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(sc))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(f), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "protocol.wait" in r.stderr + r.stdout and "fedcs" in r.stderr + r.stdout
    assert not out.exists() and list(tmp_path.iterdir()) == [f]


def test_fedcs_with_a_deadline_admits_what_its_schedule_fits():
    """Deadline 5.1 s, every client a candidate: in round 1 (a-priori profiles) the six fast
    clients fit, and only as many slow ones (5 s of compute each) as their one-at-a-time
    uploads leave room for; replayed, the admitted schedule ends before the deadline."""
    from devices.selectors.fedcs import greedy
    w = world_run(two_speed(rounds=1, **{"protocol.select": {"model": "fedcs", "fraction_candidates": 1.0},
                                         "protocol.wait": {"mode": "deadline", "seconds": 5.1}}))
    log = next(log for log in w.recorder.rounds if log.round == 1)
    S = log.clients()[log.selected]
    p = w.protocol.selecting.profiles(np.arange(12))
    order = greedy(p.t_down, p.t_comp, p.t_up, 5.1)
    assert S.tolist() == sorted(order) and set(range(6)) <= set(S.tolist()) and 6 < len(S) < 12
    Td = p.t_down[order].max()
    free = Td
    for i in order:
        free = max(free, Td + p.t_comp[i]) + p.t_up[i]
    assert free < 5.1


def test_a_selection_outside_the_available_clients_is_a_contract_error():
    from emulator.api import Selector, register
    with registry_snapshot():
        class Bad(Selector):
            def select(self, ctx):
                return [int(ctx.num_clients)]              # not a client
        register("selection", "bad", None, "returns a client that does not exist", lambda p, ctx=None: Bad())
        w = world_run(two_speed(**{"protocol.select": {"model": "bad"}}))
    assert w.status == "failed" and isinstance(w.error, ContractError)
    assert w.error.round == 1 and w.error.method == "select" and w.error.virtual_time == 0.0
    assert "selection model 'bad' (class" in w.message and "test_selection_engine.py" in w.message
    assert "round 1" in w.message and "[12]" in w.message and "ctx.available" in w.message


# ----------------------------------------------------------------------------- a plugin in a sweep
@pytest.mark.slow
def test_a_plugin_selector_runs_in_a_local_sweep(tmp_path):
    """examples/fast_first.py via `plugins:` in a sweep's base: every run selects, each round,
    the k available clients with the shortest expected round (the fast group), and its
    config.yaml replays to the same records."""
    from emulator import sweep as sw
    base = two_speed(rounds=3, **{"protocol.select": {"model": "fast_first", "k": 3}})
    base["plugins"] = [str(ROOT / "examples" / "fast_first.py")]
    spec = sw.load_spec({"name": "pl", "base": base, "out": str(tmp_path / "sweep"), "seeds": 2})
    res = sw.run_sweep(spec, workers=1, threads=1)
    assert res.counts["complete"] == 2, res.index[["run", "status", "error"]].to_string()
    for rid in res.index["run"]:
        d = tmp_path / "sweep" / "runs" / rid
        c = pd.read_csv(d / "clients.csv")
        assert (c[c["selected"]]["client"] < 6).all()
        again = emulator.run(d / "config.yaml", out=tmp_path / f"replay_{rid}")
        pd.testing.assert_frame_equal(frames(d)[1], frames(again.run_dir)[1])


def test_loss_probe_equals_a_direct_evaluation():
    from emulator.compute.executor import SequentialExecutor
    from emulator.compute.flat import FlatModel
    from emulator.compute.loss_probe import probe_losses
    from emulator.workloads import models
    from conftest import executor_on_random_data
    ctx = models.ModelContext((1, 8, 8), 10)
    torch.manual_seed(0)
    net = FlatModel(models.mlp(models.MlpParams(hidden=16), ctx), torch.device("cpu"), torch.float64)
    ex = executor_on_random_data(SequentialExecutor, net, (1, 8, 8), [30, 5000, 7])
    w = net.initial_vector()
    got = probe_losses(ex, 0, w, None, np.array([0, 1, 2]), 4)
    td = ex.tasks[0]
    want = []
    for c in range(3):
        rows = td.client_rows[c]
        want.append(float(F.cross_entropy(net.forward(w, td.x[rows]), td.y[rows])))
    assert got == pytest.approx(want, rel=1e-12)
    sub = probe_losses(ex, 0, w, None, np.array([1]), 4, max_samples=64)
    pick = np.sort(ex.streams.keyed("selection.probe", 1, 4).choice(5000, 64, replace=False))
    rows = td.client_rows[1][torch.as_tensor(pick)]
    assert sub[0] == pytest.approx(float(F.cross_entropy(net.forward(w, td.x[rows]), td.y[rows])), rel=1e-12)
    assert ex.stats.loss_probe_rows == 5037 + 64


def test_selection_weights_reach_a_client_by_client_aggregation():
    """The same equal weights when the algorithm aggregates arrival by arrival (no cohort)."""
    from emulator.api import FedAvg, FedAvgParams, register
    with registry_snapshot():
        class ClientWise(FedAvg, selection_weights=True):
            """not cohort_path (not inherited): every arrival as its own Arrival; weights declared"""
        register("algorithm", "fedavg_clientwise", FedAvgParams, "FedAvg, client by client", ClientWise)
        w = world_run(two_speed(rounds=1, **{
            "protocol.select": {"model": "power_of_choice", "k": 3, "d": 12},
            "workload.partition": {"name": "lognormal", "sigma": 0.5, "min_size": 20},
            "algorithm": {"name": "fedavg_clientwise", "lr": 0.1}}))
    log = next(log for log in w.recorder.rounds if log.round == 1)
    assert (log.weight[log.selected] == 1 / 3).all()
    assert len(set(w.tasks[0].client_sizes[log.selected].tolist())) > 1


def test_selection_weights_are_declared_per_class_not_inherited():
    """A FedAvg subclass with an aggregation of its own does not silently honour the
    selection's weights: it declares `selection_weights=True` or the scenario is refused."""
    import pytest
    from emulator.api import FedAvg, FedAvgParams, ScenarioError, register
    from emulator.algorithms.fedprox import FedProx
    assert FedAvg.selection_weights and FedProx.selection_weights
    with registry_snapshot():
        class Plain(FedAvg):
            pass
        assert not Plain.selection_weights
        register("algorithm", "fedavg_plain", FedAvgParams, "FedAvg, undeclared", Plain)
        with pytest.raises(ScenarioError, match="protocol.select.weights"):
            world_run(two_speed(rounds=1, **{"protocol.select": {"model": "power_of_choice", "k": 3, "d": 12},
                                            "algorithm": {"name": "fedavg_plain", "lr": 0.1}}))
