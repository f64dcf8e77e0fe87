"""Per-client evaluation (`evaluation:`, docs/fairness.md): the local test rows, the batched
evaluation against a loop, the saved model against what client_eval.csv reports, the metrics
columns against their definitions, and a charged evaluation's seconds."""
import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from emulator.measures import fairness
from emulator.scenario import schema as scenario
from emulator.sim.world import World
from emulator.workloads.evaluate import ClassificationEval, PerClientEval

from conftest import tiny

LINK = {"latency": 0.01, "up_mbps": 10, "down_mbps": 10}


def two_groups(**over) -> dict:
    """tiny (logreg on digits) with a Dirichlet partition, 8 clients in two device groups."""
    sc = tiny(**{"clients.count": 8, "workload.partition": {"name": "dirichlet", "alpha": 0.5},
                 "protocol.select": {"model": "uniform", "k": 4}, "run.rounds": 4, **over})
    sc["clients"]["groups"] = [
        {"name": "fast", "count": 3, "compute": {"model": "constant", "step_time": 0.1}, "network": LINK},
        {"name": "slow", "count": 5, "compute": {"model": "lognormal", "mean_step_time": 0.3, "sigma": 0.4},
         "network": LINK}]
    return sc


def world(sc) -> World:
    return World(scenario.load(copy.deepcopy(sc)))


# --------------------------------------------------------------------------- local test rows
def test_held_out_rows_leave_the_training_rows_and_are_the_same_for_the_same_seed():
    sc = two_groups(evaluation={"holdout": 0.3})
    plain = world(two_groups()).tasks[0].data.client_indices
    a, b = world(sc).tasks[0], world(sc).tasks[0]
    other = world({**sc, "seed": 5}).tasks[0]
    for k, rows in enumerate(plain):
        n = len(rows)
        test, train = a.local.of(k), np.asarray(a.data.client_indices[k])
        assert len(test) == min(max(1, round(0.3 * n)), n - 1)
        assert not set(test) & set(train) and sorted(set(test) | set(train)) == sorted(rows)
        assert a.client_sizes[k] == len(train)                         # trained on what is left
        assert np.array_equal(test, b.local.of(k)) and np.array_equal(train, b.data.client_indices[k])
    assert a.local.source == "train"
    assert not np.array_equal(a.local.rows, other.local.rows)        # another seed, another draw


def test_test_rows_split_the_test_set_with_the_workloads_partitioner():
    t = world(two_groups(evaluation={"rows": "test"})).tasks[0]
    assert t.local.source == "test"
    assert np.array_equal(np.sort(t.local.rows), np.arange(len(t.data.y_test)))   # every test row, once
    plain = world(two_groups()).tasks[0]
    for k in range(8):                                                 # the training rows are untouched
        assert np.array_equal(t.data.client_indices[k], plain.data.client_indices[k])


# --------------------------------------------------------------------------- batched = loop
def test_batched_per_client_evaluation_equals_a_loop_of_per_client_evaluations():
    t = world(two_groups(evaluation={"holdout": 0.3})).tasks[0]
    torch.manual_seed(0)
    w = t.algorithm.global_params() + 0.05 * torch.randn(t.net.dim)
    x, y = torch.as_tensor(t.data.x_train), torch.as_tensor(t.data.y_train)
    ev = PerClientEval(t.net, x, y, t.local, batch=7)                # chunks straddle clients
    for clients in (np.arange(8), np.array([1, 4, 6])):                # everyone, and a sample
        n, loss, acc = ev(w, clients)
        for j, k in enumerate(clients):
            rows = torch.as_tensor(t.local.of(k))
            one = ClassificationEval(t.net, x[rows], y[rows])(w)
            assert n[j] == len(rows)
            assert acc[j] == one["test_acc"]
            assert loss[j] == pytest.approx(one["test_loss"], rel=1e-6)


# --------------------------------------------------------------------------- the run's records
@pytest.fixture(scope="module")
def holdout_run(tmp_path_factory):
    import emulator
    sc = two_groups(evaluation={"holdout": 0.3})
    return sc, emulator.run(copy.deepcopy(sc), out=tmp_path_factory.mktemp("ev") / "run")


def test_reported_accuracy_is_the_saved_models_accuracy_on_the_clients_local_rows(holdout_run):
    sc, res = holdout_run
    ce = pd.read_csv(res.run_dir / "client_eval.csv")
    assert list(ce.columns) == ["evaluation", "round", "virtual_time", "client", "group", "n", "loss", "acc"]
    last = ce[ce["evaluation"] == ce["evaluation"].max()].set_index("client")
    assert len(last) == 8 and last["round"].unique().tolist() == [4]
    t = world(sc).tasks[0]
    module = t.net.module
    torch.nn.utils.vector_to_parameters(torch.as_tensor(np.load(res.run_dir / "model.npy")), module.parameters())
    module.eval()
    for k in range(8):                                   # the saved model, one client at a time
        rows = t.local.of(k)
        with torch.no_grad():
            out = module(torch.as_tensor(t.data.x_train[rows]))
        y = torch.as_tensor(t.data.y_train[rows])
        assert last.loc[k, "n"] == len(rows)
        assert last.loc[k, "acc"] == pytest.approx(float((out.argmax(1) == y).double().mean()), abs=1e-12)
        assert last.loc[k, "loss"] == pytest.approx(float(F.cross_entropy(out, y)), rel=1e-6)
        assert last.loc[k, "group"] == ("fast" if k < 3 else "slow")


def test_metrics_columns_are_their_definitions_recomputed_from_client_eval_csv(holdout_run):
    _, res = holdout_run
    ce = pd.read_csv(res.run_dir / "client_eval.csv")
    m = pd.read_csv(res.run_dir / "metrics.csv").dropna(subset=["test_acc"]).reset_index(drop=True)
    assert list(m["round"]) == sorted(ce["round"].unique()) == [0, 1, 2, 3, 4]
    for r, e in ce.groupby("round"):
        row = m[m["round"] == r].iloc[0]
        a, n = e["acc"].to_numpy(), e["n"].to_numpy()
        low = np.sort(a)[:math.ceil(0.1 * len(a))]
        high = np.sort(a)[::-1][:math.ceil(0.1 * len(a))]
        want = {"client_acc_mean": a.mean(), "client_acc_wmean": (a * n).sum() / n.sum(),
                "client_acc_std": np.sqrt(((a - a.mean()) ** 2).mean()), "client_acc_worst10": low.mean(),
                "client_acc_best10": high.mean(), "client_acc_jain": a.sum() ** 2 / (len(a) * (a ** 2).sum()),
                "acc_group_fast": a[e["group"] == "fast"].mean(), "acc_group_slow": a[e["group"] == "slow"].mean()}
        for col, v in want.items():
            assert row[col] == pytest.approx(v, rel=1e-12, abs=1e-15), (r, col)
            assert 0 <= row[col] <= 1
    assert m["client_acc_mean"].iloc[-1] > m["client_acc_mean"].iloc[0] + 0.1        # it learns


def test_the_worked_example_of_the_definitions():
    a = np.arange(1, 11) / 10                                   # accuracies 10 %, 20 %, ..., 100 %
    cols = fairness.client_columns(a, np.ones(10), ["x"] * 5 + ["y"] * 5, ["x", "y", "z"])
    assert cols["client_acc_mean"] == pytest.approx(0.55)
    assert cols["client_acc_std"] ** 2 == pytest.approx(0.0825)          # 825 %^2
    assert cols["client_acc_worst10"] == pytest.approx(0.1) and cols["client_acc_best10"] == pytest.approx(1.0)
    assert cols["client_acc_jain"] == pytest.approx(5.5 ** 2 / (10 * 3.85))
    assert cols["acc_group_x"] == pytest.approx(0.3) and cols["acc_group_y"] == pytest.approx(0.8)
    assert math.isnan(cols["acc_group_z"])
    assert fairness.tail_mean(np.arange(11), True) == pytest.approx(0.5)     # ceil(1.1) = 2 lowest
    assert fairness.jain([0, 0]) == 1.0
    w = fairness.client_columns([1.0, 0.0], [3, 1], ["x", "x"], ["x"])
    assert w["client_acc_wmean"] == pytest.approx(0.75) and w["client_acc_mean"] == pytest.approx(0.5)


def test_with_the_test_set_split_the_row_weighted_mean_is_the_global_accuracy(run_in):
    res = run_in(two_groups(evaluation={"rows": "test"}))
    m = res.metrics.dropna(subset=["test_acc"])
    assert np.allclose(m["client_acc_wmean"], m["test_acc"], rtol=0, atol=1e-12)
    assert not np.allclose(m["client_acc_mean"], m["test_acc"], rtol=0, atol=1e-3)


def test_a_sample_of_clients_is_drawn_afresh_at_every_evaluation(run_in):
    res = run_in(two_groups(evaluation={"clients": 3}, **{"run.rounds": 6}))
    ce = pd.read_csv(res.run_dir / "client_eval.csv")
    per = ce.groupby("evaluation")["client"].apply(tuple)
    assert (ce.groupby("evaluation").size() == 3).all() and per.nunique() > 2
    again = run_in(two_groups(evaluation={"clients": 3}, **{"run.rounds": 6}), name="again")
    assert pd.read_csv(again.run_dir / "client_eval.csv").equals(ce)


def test_without_the_block_nothing_changes(run_in):
    a = run_in(two_groups(), name="a")
    b = run_in(two_groups(evaluation={"rows": "test"}), name="b")     # the test split trains the same
    assert not (a.run_dir / "client_eval.csv").exists()
    assert "client_acc_mean" not in a.metrics
    cols = [c for c in a.metrics.columns if "wall" not in c]
    pd.testing.assert_frame_equal(a.metrics[cols], b.metrics[cols])


# --------------------------------------------------------------------------- charged
@pytest.mark.parametrize("protocol", ["rounds", "intervals"])
def test_a_charged_evaluation_adds_each_clients_forward_steps_and_holds_the_next_round(run_in, protocol):
    over = {"evaluation": {"holdout": 0.3}}
    if protocol == "intervals":
        over["protocol"] = {"name": "intervals", "interval": 2.0}
    free = run_in(two_groups(**over), name="free")
    over["evaluation"] = {"holdout": 0.3, "charge": True}
    paid = run_in(two_groups(**over), name="paid")
    t = world(two_groups(**over)).tasks[0]
    c = pd.read_csv(paid.run_dir / "clients.csv")
    ce = pd.read_csv(paid.run_dir / "client_eval.csv")
    assert "eval_time" not in pd.read_csv(free.run_dir / "clients.csv")
    slowest = []
    for r in range(1, 5):
        got = c[c["round"] == r].set_index("client")["eval_time"]
        # the fast group's constant 0.1 s step, one step per batch of min(16, n_train) rows
        for k in range(3):
            m = len(t.local.of(k))
            assert got[k] == pytest.approx(math.ceil(m / min(16, t.client_sizes[k])) * 0.1, rel=1e-12)
        assert (got[3:] > 0).all()
        slowest.append(got.max())
    # what is trained is the same; every round starts the slowest evaluation later
    pd.testing.assert_series_equal(free.metrics["test_acc"], paid.metrics["test_acc"])
    shift = paid.metrics["virtual_time"].to_numpy() - free.metrics["virtual_time"].to_numpy()
    assert shift == pytest.approx(np.r_[0, np.cumsum([0, *slowest[:3]])], abs=1e-9)
    assert paid.summary["virtual_time"] == pytest.approx(free.summary["virtual_time"] + sum(slowest), abs=1e-9)
    assert (ce.groupby("round")["virtual_time"].first().to_numpy()[1:] ==
            pytest.approx(paid.metrics["virtual_time"].to_numpy()[1:]))


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("block, path", [
    ({"rows": "local"}, "evaluation.rows"), ({"holdout": 1.0}, "evaluation.holdout"),
    ({"clients": 0}, "evaluation.clients"), ({"clients": 9}, "evaluation.clients"),
    ({"clients": "some"}, "evaluation.clients"), ({"charge": "maybe"}, "evaluation.charge"),
    ({"every": 2}, "evaluation.every")])
def test_bad_evaluation_values_name_their_yaml_path_and_exit_2(tmp_path, block, path):
    import yaml
    from typer.testing import CliRunner

    from emulator.cli import app
    f = tmp_path / "sc.yaml"
    f.write_text(yaml.safe_dump(two_groups(evaluation=block)))
    r = CliRunner().invoke(app, ["run", str(f), "--out", str(tmp_path / "out"), "-q"])
    assert r.exit_code == 2 and f"  {path}:" in r.output, r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("over, path, words", [
    ({"protocol": {"name": "async", "local_steps": 3}, "algorithm": {"name": "fedasync", "lr": 0.1},
      "evaluation": {"charge": True}}, "evaluation.charge", "charge: true works under intervals, rounds"),
    ({"workload.partition": {"name": "shards", "classes_per_client": 50}, "evaluation": {"rows": "test"}},
     "evaluation.rows", "use rows: holdout")])
def test_evaluations_that_cannot_be_made_are_refused_with_their_path(tmp_path, over, path, words):
    from emulator.errors import ScenarioError
    import emulator
    with pytest.raises(ScenarioError) as e:
        emulator.run(two_groups(**over), out=tmp_path / "out")
    assert e.value.problems[0][0] == path and words in e.value.problems[0][1]
    assert not (tmp_path / "out").exists()


def test_a_client_too_small_to_hold_out_from_is_refused():
    from emulator.errors import ScenarioError
    with pytest.raises(ScenarioError) as e:                       # 1,437 rows among 1,000 clients
        world(tiny(**{"clients.count": 1000, "protocol.select": {"model": "all"}, "evaluation": {"holdout": 0.5}}))
    assert e.value.problems[0][0] == "evaluation.holdout" and "fewer than 2 training rows" in e.value.problems[0][1]


def test_quadratic_tasks_have_no_per_client_accuracy():
    from conftest import quadratic_scenario
    from emulator.errors import ScenarioError
    with pytest.raises(ScenarioError, match="classification accuracy"):
        world({**quadratic_scenario(), "evaluation": {}})


def test_multi_model_runs_evaluate_each_model_on_its_own_rows(run_in):
    sc = tiny(**{"run.rounds": 3, "clients.count": 8})
    wl = sc.pop("workload")
    sc["workloads"] = [{"dataset": {"name": "synthetic", "alpha": 0.5, "beta": 0.5}, "model": {"name": "logreg"},
                        "batch_size": 10, "algorithm": {"lr": 0.05}}, dict(wl, algorithm={"lr": 0.2})]
    sc["protocol"] = {"name": "multi_model", "assignment": "mfa_rr", "local_steps": 5}
    sc["evaluation"] = {"rows": "test"}
    res = run_in(sc)
    ce = pd.read_csv(res.run_dir / "client_eval.csv")
    assert list(ce.columns[:3]) == ["evaluation", "round", "model"]
    assert (ce.groupby(["model", "evaluation"]).size() == 8).all() and ce["evaluation"].max() == 3
    for model, e in ce.groupby("model"):       # each model's rows: the synthetic devices' own, the digits split
        assert e[e["evaluation"] == 0]["n"].sum() == len(world(sc).tasks[model].data.y_test)
    m = res.metrics.dropna(subset=["test_acc"])
    assert np.allclose(m["client_acc_wmean"], m["test_acc"], rtol=0, atol=1e-12)
    sc["evaluation"] = {"charge": True}
    from emulator.errors import ScenarioError
    with pytest.raises(ScenarioError, match="charge: true works under intervals, rounds"):
        world(sc)


def test_both_round_engines_record_the_same_charged_evaluation(run_in):
    sc = two_groups(evaluation={"holdout": 0.3, "charge": True, "clients": 5})
    runs = [run_in(dict(sc, protocol={**sc["protocol"], "engine": e}), name=e) for e in ("vector", "process")]
    assert [r.summary["engine"] for r in runs] == ["vector", "process"]
    for f in ("client_eval.csv", "clients.csv"):
        a, b = (pd.read_csv(r.run_dir / f) for r in runs)
        pd.testing.assert_frame_equal(a, b)
    cols = [c for c in runs[0].metrics.columns if "wall" not in c]
    pd.testing.assert_frame_equal(runs[0].metrics[cols], runs[1].metrics[cols])
