"""Batched (vmap) executor = sequential executor: same parameters to 1e-5 after 5 rounds,
same stats, same laziness; same seed => same metrics whichever executor ran."""
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from emulator.compute.batched import AutoExecutor, AutoParams, BatchedExecutor, BatchedParams, auto_batches
from emulator.compute.executor import SequentialExecutor, SequentialParams, TaskData
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob
from emulator.compute.lazy import derived, force, resolve
from emulator.workloads import models

from conftest import executor_on_random_data, tiny

CPU = torch.device("cpu")
SIZES = [30, 45, 23, 52]          # uneven: partial last batches of an epoch (batch 8)
CTX = models.ModelContext((1, 16, 16), 10)
MODELS = {
    "logreg": lambda: models.logreg(models.LogRegParams(), CTX),
    "mlp": lambda: models.mlp(models.MlpParams(hidden=32), CTX),
    "cnn_mnist": lambda: models.cnn_mnist(models.CnnMnistParams(), CTX),
}


def make_executor(cls, model, params=None):
    torch.manual_seed(0)
    net = FlatModel(MODELS[model](), CPU, torch.float64)
    return executor_on_random_data(cls, net, CTX.input_shape, SIZES, params), net


def _corrections(dim):
    g = torch.Generator().manual_seed(7)
    return [0.01 * torch.randn(dim, generator=g, dtype=torch.float64) for _ in SIZES]


# case -> (rule for round t, steps of client c in round t, batch size, use corrections)
CASES = {
    "fedavg": (lambda t: LocalRule(lr=0.1), lambda t, c: 5, 8, False),
    "fedprox": (lambda t: LocalRule(lr=0.1, prox_mu=0.5), lambda t, c: 5, 8, False),
    "momentum_wd": (lambda t: LocalRule(lr=0.05, momentum=0.9, weight_decay=1e-3), lambda t, c: 5, 8, False),
    "nesterov_full_batch": (lambda t: LocalRule(lr=0.05, momentum=0.5, nesterov=True), lambda t, c: 3, None, False),
    "variable_steps": (lambda t: LocalRule(lr=0.1, momentum=0.5), lambda t, c: (c * 3 + t) % 8, 8, False),
    "correction": (lambda t: LocalRule(lr=0.1), lambda t, c: 4 + c, 8, True),
    "lr_decay": (lambda t: LocalRule(lr=tuple(0.1 * 0.9 ** (t + h) for h in range(4))), lambda t, c: 6, 8, False),
}


def fedavg_rounds(cls, model, case, rounds=5, params=None):
    """`rounds` rounds of sample-weighted FedAvg over the 4 clients, every job of a round
    resolved together (so the batched executor really stacks them)."""
    rule_at, steps_at, batch, use_corr = CASES[case]
    ex, net = make_executor(cls, model, params)
    w = net.initial_vector()
    corr = _corrections(net.dim) if use_corr else [None] * len(SIZES)
    grads = []
    for t in range(1, rounds + 1):
        futs = [ex.submit(TrainJob(0, c, t, steps_at(t, c), LocalSpec(w, rule_at(t), correction=corr[c],
                                                                       want_grad_mean=use_corr), batch))
                for c in range(len(SIZES))]
        res = [r for r in resolve(futs)]
        grads += [r.grad_mean for r in res if r.grad_mean is not None]
        w = sum(n * r.params for n, r in zip(SIZES, res)) / sum(SIZES)
    return w, ex.stats, grads, [r.loss_mean for r in res]


def rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("case", list(CASES))
def test_batched_equals_sequential_after_5_rounds(model, case):
    ws, st_s, gs, ls = fedavg_rounds(SequentialExecutor, model, case)
    wb, st_b, gb, lb = fedavg_rounds(BatchedExecutor, model, case)
    assert rel(wb, ws) < 1e-5
    assert st_b == st_s                                     # same jobs, steps and gradients counted
    assert len(gs) == len(gb) and all(rel(b, a) < 1e-5 for a, b in zip(gs, gb))
    assert np.allclose(lb, ls, rtol=1e-6, equal_nan=True)


def test_chunks_and_auto_give_the_same_parameters():
    ws, st, _, _ = fedavg_rounds(BatchedExecutor, "mlp", "variable_steps")
    wc, stc, _, _ = fedavg_rounds(BatchedExecutor, "mlp", "variable_steps", params=BatchedParams(chunk=3))
    wa, sta, _, _ = fedavg_rounds(AutoExecutor, "mlp", "variable_steps", params=AutoParams(min_jobs=2, max_step_macs=1e9))
    assert rel(wc, ws) < 1e-12 and rel(wa, ws) < 1e-12 and st == stc == sta


def test_auto_rule():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    p = AutoParams()
    assert auto_batches(gpu, 2, 10**9, p)                 # GPU: any stack of >= 2 jobs
    assert not auto_batches(cpu, 1, 1, p)                 # one job: nothing to stack
    assert auto_batches(cpu, 100, 7840 * 32, p)           # logreg, many clients
    assert not auto_batches(cpu, 4, 7840 * 32, p)         # few clients: a plain loop
    assert not auto_batches(cpu, 100, 480_500 * 32, p)    # cnn_mnist on CPU: a plain loop


# --------------------------------------------------------------------------- laziness
def test_batched_unread_jobs_never_run():
    ex, net = make_executor(BatchedExecutor, "logreg")
    w0 = net.initial_vector()
    sub = lambda c, start, t=1: ex.submit(TrainJob(0, c, t, 3, LocalSpec(start, LocalRule(lr=0.1)), 8))  # noqa: E731
    a, b, a2 = sub(0, w0), sub(1, w0), sub(3, w0)       # b is never read
    fused = derived(lambda r, s: 0.5 * (r.params + s.params), a, a2)
    c = sub(2, fused, t=2)
    assert ex.stats.grad_evals == 0
    out = resolve([c])[0]
    assert a.done and a2.done and c.done and not b.done
    assert ex.stats.grad_evals == 9 and ex.stats.jobs_computed == 3
    ref, _ = make_executor(SequentialExecutor, "logreg")     # eager reference
    ea = [ref.submit(TrainJob(0, k, 1, 3, LocalSpec(w0, LocalRule(lr=0.1)), 8)).value() for k in (0, 3)]
    ec = ref.submit(TrainJob(0, 2, 2, 3, LocalSpec(0.5 * (ea[0].params + ea[1].params), LocalRule(lr=0.1)), 8)).value()
    assert rel(out.params, ec.params) < 1e-12


def test_probe_jobs_match_sequential():
    res = {}
    for cls in (SequentialExecutor, BatchedExecutor):
        ex, net = make_executor(cls, "mlp")
        w0 = net.initial_vector()
        futs = [ex.submit(TrainJob(0, c, 1, 4, LocalSpec(w0, LocalRule(lr=0.1), probe=True), 8)) for c in range(4)]
        resolve([f.probe for f in futs] + futs)
        res[cls] = ([f.value().params for f in futs], [force(f.probe) for f in futs], ex.stats)
    (ps, qs, ss), (pb, qb, sb) = res.values()
    assert all(rel(b, a) < 1e-10 for a, b in zip(ps, pb)) and ss == sb
    assert all(q1["G2"] == pytest.approx(q2["G2"], rel=1e-10) for q1, q2 in zip(qs, qb))


# --------------------------------------------------------------------------- through the emulator
def _run_all(run_in, sc, names=("sequential", "batched", "auto")):
    """float64 runs; `auto` told to stack from 2 jobs (the scenario's executor block reaches
    the executor), so every executor really runs its own path."""
    out = {}
    for name in names:
        ex = {"name": name, "dtype": "float64"}
        if name == "auto":
            ex["min_jobs"] = 2
        s = {**sc, "executor": ex}
        out[name] = run_in(s, name)
    return out


def test_same_seed_same_metrics_whichever_executor(run_in, monkeypatch):
    sc = tiny(**{"algorithm": {"name": "fedprox", "lr": 0.1, "mu": 0.1, "momentum": 0.5, "lr_decay": 0.9},
                 "run.rounds": 5, "protocol.select.k": 4, "clients.count": 8})
    stacked = []
    real = BatchedExecutor.run_stacked
    monkeypatch.setattr(BatchedExecutor, "run_stacked", lambda self, futs: (stacked.append((self.name, len(futs))),
                                                                           real(self, futs))[1])
    runs = _run_all(run_in, sc)
    # batched and auto (min_jobs 2) really stacked the 4 jobs of every round
    assert stacked.count(("batched", 4)) == 5 and stacked.count(("auto", 4)) == 5
    ref = runs["sequential"]
    for name, r in runs.items():
        m = r.metrics
        for col in m.columns:
            if col == "wall_time":
                continue
            if pd.api.types.is_float_dtype(m[col]):
                assert np.allclose(m[col], ref.metrics[col], rtol=1e-9, atol=1e-12, equal_nan=True), (name, col)
            else:
                assert (m[col] == ref.metrics[col]).all(), (name, col)
        a = np.load(r.run_dir / "model.npy")
        assert np.allclose(a, np.load(ref.run_dir / "model.npy"), rtol=1e-9, atol=1e-12)
        assert r.summary["grad_steps_computed"] == ref.summary["grad_steps_computed"]
    again = run_in({**sc, "executor": {"name": "batched", "dtype": "float64"}}, "batched_again")
    assert again.metrics.drop(columns="wall_time").equals(runs["batched"].metrics.drop(columns="wall_time"))


def test_intervals_variable_tau_through_the_emulator(run_in):
    """T-SFL intervals: each client fits its own number of steps (tau_i) into the interval."""
    sc = tiny(**{"run.rounds": 5})
    sc["protocol"] = {"name": "intervals", "interval": 1.0, "iteration": "batch"}
    sc["clients"]["groups"] = [
        {"name": f"g{i}", "count": 2, "compute": {"model": "constant", "step_time": st}, "network": "instant"}
        for i, st in enumerate((0.1, 0.17, 0.3))]
    sc["algorithm"] = {"name": "fedavg", "lr": 0.1}
    runs = _run_all(run_in, sc, ("sequential", "batched"))
    steps = pd.read_csv(runs["batched"].run_dir / "clients.csv")["steps"]
    assert steps.nunique() >= 3
    a, b = (np.load(r.run_dir / "model.npy") for r in runs.values())
    assert np.linalg.norm(a - b) <= 1e-10 * np.linalg.norm(a)


# --------------------------------------------------------------------------- workers (threads)
def _seq_workers(n):
    return SequentialParams(workers=n)


@pytest.mark.parametrize("model", ["mlp", "cnn_mnist"])
@pytest.mark.parametrize("case", ["fedprox", "variable_steps", "correction", "lr_decay"])
def test_workers_equal_the_loop(model, case):
    """Clients trained on 3 threads at once (one torch thread each, a module replica each)
    compute what the loop computes: the same parameters, gradient means, losses and counts."""
    ws, st_s, gs, ls = fedavg_rounds(SequentialExecutor, model, case, params=_seq_workers(1))
    ww, st_w, gw, lw = fedavg_rounds(SequentialExecutor, model, case, params=_seq_workers(3))
    assert rel(ww, ws) < 1e-12
    assert st_w == st_s
    assert len(gs) == len(gw) and all(rel(b, a) < 1e-12 for a, b in zip(gs, gw))
    assert np.allclose(lw, ls, rtol=1e-12, equal_nan=True)


def test_workers_really_run_jobs_on_threads_and_restore_torch_threads(monkeypatch):
    seen = []
    real = SequentialExecutor.train
    monkeypatch.setattr(SequentialExecutor, "train",
                        lambda self, job, net=None: (seen.append((threading.get_ident(), torch.get_num_threads(),
                                                                  net and id(net.module))), real(self, job, net))[1])
    before = torch.get_num_threads()
    fedavg_rounds(SequentialExecutor, "cnn_mnist", "fedavg", rounds=2, params=_seq_workers(2))
    idents = {s[0] for s in seen}
    assert len(seen) == 8 and threading.get_ident() not in idents and len(idents) >= 2
    assert {s[1] for s in seen} == {1}                      # one torch thread per worker
    assert len({s[2] for s in seen}) == 2                   # a module per worker (functional_call swaps it)
    assert torch.get_num_threads() == before                # restored for evaluation
    seen.clear()
    fedavg_rounds(SequentialExecutor, "cnn_mnist", "fedavg", rounds=1, params=_seq_workers(1))
    assert {s[0] for s in seen} == {threading.get_ident()}  # one worker: the loop, in the caller


def test_workers_probe_jobs_and_errors():
    res = {}
    for n in (1, 2):
        ex, net = make_executor(SequentialExecutor, "mlp", _seq_workers(n))
        w0 = net.initial_vector()
        futs = [ex.submit(TrainJob(0, c, 1, 4, LocalSpec(w0, LocalRule(lr=0.1), probe=True), 8)) for c in range(4)]
        resolve([f.probe for f in futs] + futs)
        res[n] = ([f.value().params for f in futs], [force(f.probe) for f in futs], ex.stats)
    (p1, q1, s1), (p2, q2, s2) = res[1], res[2]
    assert all(rel(b, a) < 1e-12 for a, b in zip(p1, p2)) and s1 == s2 and s1.probe_evals == 12
    assert all(a["G2"] == pytest.approx(b["G2"], rel=1e-12) for a, b in zip(q1, q2))
    ex, net = make_executor(SequentialExecutor, "mlp", _seq_workers(2))
    bad = LocalSpec(torch.zeros(net.dim + 1, dtype=torch.float64), LocalRule(lr=0.1))   # wrong length
    futs = [ex.submit(TrainJob(0, c, 1, 2, LocalSpec(net.initial_vector(), LocalRule(lr=0.1)) if c else bad, 8))
            for c in range(4)]
    with pytest.raises(RuntimeError):
        resolve(futs)


def test_workers_through_the_emulator_same_metrics(run_in):
    sc = tiny(**{"algorithm": {"name": "fedprox", "lr": 0.1, "mu": 0.1, "momentum": 0.5},
                 "run.rounds": 3, "protocol.select.k": 4, "clients.count": 8, "workload.model": {"name": "mlp"}})
    ref = run_in({**sc, "executor": {"name": "sequential", "dtype": "float64", "workers": 1}}, "seq")
    got = run_in({**sc, "executor": {"name": "auto", "dtype": "float64", "workers": 2}}, "auto2")
    assert got.metrics.drop(columns="wall_time").equals(ref.metrics.drop(columns="wall_time"))
    assert np.array_equal(np.load(got.run_dir / "model.npy"), np.load(ref.run_dir / "model.npy"))


def test_executors_read_their_declared_params():
    """Each executor reads the options of its declared `params_type` (no attribute probing):
    chunk and workers as given, its defaults when none is given, a TypeError for another
    executor's options; TaskData takes ClientRows only."""
    ex = make_executor(BatchedExecutor, "logreg", BatchedParams(chunk=3, workers=2))[0]
    assert (ex.chunk, ex.workers) == (3, 2)
    ex = make_executor(AutoExecutor, "logreg", AutoParams(chunk=5, min_jobs=4))[0]
    assert (ex.chunk, ex.rule.min_jobs) == (5, 4)
    assert make_executor(BatchedExecutor, "logreg")[0].chunk == 256
    assert make_executor(SequentialExecutor, "logreg", SequentialParams(workers=3))[0].workers == 3
    with pytest.raises(TypeError, match="BatchedExecutor reads BatchedParams, not SequentialParams"):
        make_executor(BatchedExecutor, "logreg", SequentialParams(workers=2))
    net = make_executor(SequentialExecutor, "logreg")[1]
    with pytest.raises(TypeError, match="client_rows must be a ClientRows, not list"):
        TaskData(net, torch.zeros(2, 1), torch.zeros(2), [torch.arange(2)])
