"""Custom client training at three depths (docs/local-training.md): functional pieces (loss
terms, per-sample and gradient transforms, keyed noise) give the same parameters on the
batched and sequential paths; closed forms for terms and transforms; a torch.optim rule
equals torch's own loop; a user training function runs on the loop; laziness, step
accounting and summary.json's executor_paths hold at every depth; the example plugins
(FedDyn, DP-FedAvg, local Adam, gradient clipping) against numbers."""
import copy
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.func import functional_call, grad, vmap

import emulator
from emulator.algorithms.fedavg import FedAvg, FedAvgParams
from emulator.compute.batched import AutoExecutor, AutoParams, BatchedExecutor
from emulator.compute.executor import SequentialExecutor
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalSpec, TrainJob
from emulator.compute.lazy import resolve
from emulator.compute.pieces import ClipNorm, ClipPerSample, DPGaussianNoise, GaussianNoise, LossTerm, ProxTerm
from emulator.compute.training import LocalRule, OptimizerRule, TrainFunction
from emulator.errors import ContractError
from emulator.registry import register
from emulator.workloads import models

from conftest import executor_on_random_data, quadratic_scenario, tiny

CPU = torch.device("cpu")
SIZES = [30, 45, 23, 52]          # uneven: partial last batches (batch 8)
CTX = models.ModelContext((1, 8, 8), 10)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example(name):
    """Import examples/<name>.py as a plugin (its import registers its algorithm)."""
    spec = importlib.util.spec_from_file_location(f"flemu_example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def make_executor(cls=SequentialExecutor, model="logreg", params=None):
    torch.manual_seed(0)
    module = (models.logreg(models.LogRegParams(), CTX) if model == "logreg"
              else models.mlp(models.MlpParams(hidden=16), CTX))
    net = FlatModel(module, CPU, torch.float64)
    return executor_on_random_data(cls, net, CTX.input_shape, SIZES, params), net


@dataclass(frozen=True)
class DataCopy(LossTerm):
    """lam x the mini-batch loss again (reads the batch, its weights and the model): the total
    gradient is (1 + lam) x the data gradient."""

    lam: float

    def __call__(self, w, ctx):
        return self.lam * (ctx.model.sample_losses(ctx.model.forward(w, ctx.x), ctx.y) * ctx.weight).sum()


@dataclass(frozen=True)
class DistillToStart(LossTerm):
    """lam/2 x mean |f(w, x) - f(start, x)|^2: reads the received model through the model."""

    lam: float

    def __call__(self, w, ctx):
        d = ctx.model.forward(w, ctx.x) - ctx.model.forward(ctx.start, ctx.x)
        return 0.5 * self.lam * (d.pow(2).sum(1) * ctx.weight).sum()


@dataclass(frozen=True)
class Linear(LossTerm):
    """-<v, w> with v the spec's vector "v" (FedDyn's linear term)."""

    def __call__(self, w, ctx):
        return -(ctx.vectors["v"] * w).sum()


# case -> (rule for round t, steps of client c in round t, uses per-client vectors, correction)
CASES = {
    "prox_term": (lambda t: LocalRule(lr=0.1, terms=(ProxTerm(0.5),)), False, False),
    "batch_term": (lambda t: LocalRule(lr=0.1, terms=(DataCopy(0.5), DistillToStart(0.3))), False, False),
    "state_vectors": (lambda t: LocalRule(lr=0.1, terms=(Linear(),)), True, False),
    "per_sample_clip": (lambda t: LocalRule(lr=0.1, per_sample=(ClipPerSample(0.5),)), False, False),
    "clip_norm": (lambda t: LocalRule(lr=0.1, momentum=0.5, transforms=(ClipNorm(0.3),)), False, False),
    "noise": (lambda t: LocalRule(lr=0.1, transforms=(GaussianNoise(0.05),)), False, False),
    "everything": (lambda t: LocalRule(lr=0.05, momentum=0.5, weight_decay=1e-3, prox_mu=0.1,
                                       terms=(ProxTerm(0.2), Linear()), per_sample=(ClipPerSample(1.0),),
                                       transforms=(ClipNorm(2.0), GaussianNoise(0.01))), True, True),
}


def rounds_of(cls, case, model="logreg", rounds=2, params=None, reverse=False):
    """`rounds` rounds of FedAvg over the 4 clients with variable step counts, each round's
    jobs resolved together (the batched executor stacks them)."""
    rule_at, use_vec, use_corr = CASES[case]
    ex, net = make_executor(cls, model, params)
    w = net.initial_vector()
    g = torch.Generator().manual_seed(7)
    vecs = [0.01 * torch.randn(net.dim, generator=g, dtype=torch.float64) for _ in SIZES]
    for t in range(1, rounds + 1):
        specs = [LocalSpec(w, rule_at(t), correction=vecs[c] if use_corr else None,
                           vectors={"v": vecs[c]} if use_vec else {}) for c in range(len(SIZES))]
        order = list(range(len(SIZES)))[::-1] if reverse else range(len(SIZES))
        futs = {c: ex.submit(TrainJob(0, c, t, (c * 3 + t) % 5 + 1, specs[c], 8)) for c in order}
        res = dict(zip(futs, resolve(list(futs.values()))))
        w = sum(n * res[c].params for c, n in enumerate(SIZES)) / sum(SIZES)
    return w, ex


def rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("case", list(CASES))
def test_each_kind_batched_equals_sequential(case):
    ws, exs = rounds_of(SequentialExecutor, case)
    wb, exb = rounds_of(BatchedExecutor, case)
    assert rel(wb, ws) < 1e-9
    assert exb.stats == exs.stats
    kind = CASES[case][0](1).kind()
    assert set(exb.paths.summary({0: "a"})[f"a/{kind}"]) == {"batched"}     # really stacked


@pytest.mark.parametrize("case", ["batch_term", "everything"])
def test_auto_on_an_mlp_equals_sequential_in_another_order(case):
    wa, exa = rounds_of(AutoExecutor, case, model="mlp", params=AutoParams(min_jobs=2, max_step_macs=1e9))
    wm, _ = rounds_of(SequentialExecutor, case, model="mlp", reverse=True)  # another submission order
    assert rel(wa, wm) < 1e-9
    kind = CASES[case][0](1).kind()
    assert set(exa.paths.summary({0: "a"})[f"a/{kind}"]) == {"batched"}


def test_terms_against_closed_forms():
    """ProxTerm(mu) = the built-in prox rule; DataCopy(lam) = plain SGD at lr (1 + lam)."""
    def one(rule, cls=SequentialExecutor):
        ex, net = make_executor(cls)
        w0 = net.initial_vector()
        futs = [ex.submit(TrainJob(0, c, 1, 6, LocalSpec(w0, rule), 8)) for c in range(4)]
        return torch.stack([r.params for r in resolve(futs)])

    assert rel(one(LocalRule(lr=0.1, terms=(ProxTerm(0.7),))), one(LocalRule(lr=0.1, prox_mu=0.7))) < 1e-12
    assert rel(one(LocalRule(lr=0.1, terms=(DataCopy(0.5),))), one(LocalRule(lr=0.15))) < 1e-12
    assert rel(one(LocalRule(lr=0.1, terms=(DataCopy(0.5),)), BatchedExecutor), one(LocalRule(lr=0.15))) < 1e-9


def test_transforms_act_on_the_gradient_before_the_step():
    """One step, lr 1, full batch: w1 = w0 - mean_i clip_C(g_i) with every |clip_C(g_i)| <= C
    (per-sample clipping is active: some |g_i| > C); ClipNorm: |w1 - w0| = min(|g|, C')."""
    ex, net = make_executor()
    w0 = net.initial_vector() + 0.3
    C = 0.05
    job = TrainJob(0, 1, 1, 1, LocalSpec(w0, LocalRule(lr=1.0, per_sample=(ClipPerSample(C),))), None)
    w1 = ex.submit(job).value().params
    td = ex.tasks[0]
    x, y = td.x[td.client_rows[1]], td.y[td.client_rows[1]]

    def loss1(w, x1, y1):
        out = functional_call(net.module, net.views(w), (x1[None],))
        return torch.nn.functional.cross_entropy(out, y1[None])

    G = vmap(grad(loss1), in_dims=(None, 0, 0))(w0, x, y)
    norms = G.norm(dim=1)
    assert (norms > C).sum() > 10                              # the clip bites
    clipped = G * torch.clamp(C / norms, max=1.0)[:, None]
    assert float(clipped.norm(dim=1).max()) <= C * (1 + 1e-12)
    assert torch.allclose(w0 - w1, clipped.mean(0), rtol=1e-10, atol=1e-14)
    # whole-gradient clipping acts on the gradient, before the step: |w2 - w0| = lr x min(|g|, C')
    g = G.mean(0)
    c2 = 0.5 * float(g.norm())
    w2 = ex.submit(TrainJob(0, 1, 2, 1, LocalSpec(w0, LocalRule(lr=0.5, transforms=(ClipNorm(c2),))), None)).value()
    assert float((w0 - w2.params).norm()) == pytest.approx(0.5 * c2, rel=1e-10)
    # ... and after the terms: clip(g - v), not clip(g) - v
    v = 0.5 * g.flip(0)
    rule = LocalRule(lr=1.0, terms=(Linear(),), transforms=(ClipNorm(c2),))
    w3 = ex.submit(TrainJob(0, 1, 3, 1, LocalSpec(w0, rule, vectors={"v": v}), None)).value().params
    want = (g - v) * min(1.0, c2 / float((g - v).norm()))
    assert torch.allclose(w0 - w3, want, rtol=1e-9, atol=1e-14)


def test_noise_is_keyed_by_client_round_and_model():
    """Same (client, round, model): same draws whatever else ran before; another round: others."""
    rule = LocalRule(lr=1.0, transforms=(GaussianNoise(1.0),))
    ex, net = make_executor()
    w0 = net.initial_vector()
    a = ex.submit(TrainJob(0, 2, 5, 3, LocalSpec(w0, rule), 8))
    ex.submit(TrainJob(0, 1, 5, 4, LocalSpec(w0, rule), 8)).value()     # other draws first
    ex2, _ = make_executor(BatchedExecutor)
    b = [ex2.submit(TrainJob(0, c, 5, 3, LocalSpec(w0, rule), 8)) for c in (0, 2)]
    c = ex2.submit(TrainJob(0, 2, 6, 3, LocalSpec(w0, rule), 8))
    resolve(b + [c])
    assert rel(b[1].value().params, a.value().params) < 1e-12
    assert rel(c.value().params, a.value().params) > 0.1


def test_a_pending_state_vector_is_a_job_input_and_stays_lazy():
    """A term's vector may be a lazy value (a client state nobody has read): the job depends on
    it (resolved a level earlier); a job nobody reads computes neither itself nor its vector."""
    from emulator.compute.lazy import derived
    ex, net = make_executor(BatchedExecutor)
    w0 = net.initial_vector()
    rule = LocalRule(lr=0.1, terms=(Linear(),))
    dep = [ex.submit(TrainJob(0, c, 1, 3, LocalSpec(w0, LocalRule(lr=0.1)), 8)) for c in (0, 1)]
    vec = [derived(lambda r: 0.1 * r.params, d) for d in dep]
    read = ex.submit(TrainJob(0, 2, 2, 3, LocalSpec(w0, rule, vectors={"v": vec[0]}), 8))
    unread = ex.submit(TrainJob(0, 3, 2, 3, LocalSpec(w0, rule, vectors={"v": vec[1]}), 8))
    assert vec[0] in read.inputs()
    got = read.value().params
    assert dep[0].done and not dep[1].done and not unread.done and ex.stats.jobs_computed == 2
    ref, _ = make_executor()
    v = 0.1 * ref.submit(TrainJob(0, 0, 1, 3, LocalSpec(w0, LocalRule(lr=0.1)), 8)).value().params
    want = ref.submit(TrainJob(0, 2, 2, 3, LocalSpec(w0, rule, vectors={"v": v}), 8)).value().params
    assert rel(got, want) < 1e-12


def test_dp_noise_std_is_sigma_c_over_b():
    """One step at lr 1: sigma > 0 minus sigma = 0 is -(sigma C / B) z, z ~ N(0, I) (4 clients x
    650 coordinates; the std's standard error is 1.4 %)."""
    sigma, C, B = 1.5, 0.1, 8
    out = []
    for s in (sigma, 0.0):
        rule = LocalRule(lr=1.0, per_sample=(ClipPerSample(C),), transforms=(DPGaussianNoise(s, C),))
        ex, net = make_executor(BatchedExecutor)
        w0 = net.initial_vector()
        out.append(torch.cat([r.params for r in resolve([ex.submit(TrainJob(0, c, 1, 1, LocalSpec(w0, rule), B))
                                                         for c in range(4)])]))
    z = (out[1] - out[0]) / (sigma * C / B)
    assert len(z) == 4 * 650
    assert abs(float(z.std()) - 1) < 0.05 and abs(float(z.mean())) < 5 / np.sqrt(len(z))


def test_optimizer_rule_equals_torch_adam_by_hand():
    """One client, 3 steps of batch 8: the emulator's torch.optim.Adam = Adam on the module."""
    ex, net = make_executor(BatchedExecutor, model="mlp")
    w0 = net.initial_vector()
    rule = OptimizerRule(torch.optim.Adam, {"lr": 0.01, "betas": (0.8, 0.99)})
    job = TrainJob(0, 1, 4, 3, LocalSpec(w0, rule), 8)
    plan = ex.plan(job)
    got = ex.submit(job).value()
    m = copy.deepcopy(net.module)
    torch.nn.utils.vector_to_parameters(w0.clone(), m.parameters())
    opt = torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.99))
    td, rows = ex.tasks[0], ex.tasks[0].client_rows[1]
    for b in plan:
        opt.zero_grad()
        idx = rows[torch.from_numpy(b)]
        torch.nn.functional.cross_entropy(m(td.x[idx]), td.y[idx]).backward()
        opt.step()
    want = torch.nn.utils.parameters_to_vector(m.parameters()).detach()
    assert rel(got.params, want) < 1e-12 and rel(got.params, w0) > 1e-3
    paths = ex.paths.summary({0: "a"})["a/optimizer:Adam"]
    assert list(paths) == ["sequential"] and paths["sequential"]["why"] == [OptimizerRule.why_sequential]


def sgd_by_hand(module, batches, steps, ctx):
    """A user training loop: plain SGD, lr 0.1, on every batch."""
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    total = 0.0
    for x, y in batches:
        opt.zero_grad()
        loss = ctx.loss(module(x), y)
        loss.backward()
        opt.step()
        total += float(loss.detach())
    return total / steps


def test_train_function_runs_the_users_loop_on_the_protocols_batches():
    ex, net = make_executor(BatchedExecutor)
    w0 = net.initial_vector()
    mine = [ex.submit(TrainJob(0, c, 1, 5, LocalSpec(w0, TrainFunction(sgd_by_hand)), 8)) for c in range(4)]
    unread = ex.submit(TrainJob(0, 3, 2, 5, LocalSpec(w0, TrainFunction(sgd_by_hand)), 8))
    ref, _ = make_executor()
    theirs = [ref.submit(TrainJob(0, c, 1, 5, LocalSpec(w0, LocalRule(lr=0.1)), 8)) for c in range(4)]
    for a, b in zip(resolve(mine), resolve(theirs)):
        assert rel(a.params, b.params) < 1e-12 and a.loss_mean == pytest.approx(b.loss_mean, rel=1e-12)
    assert not unread.done and ex.stats.jobs_computed == 4 and ex.stats.steps_computed == 20
    assert ex.paths.summary({0: "a"})["a/train_fn:sgd_by_hand"]["sequential"]["jobs"] == 4

    def lazy_loop(module, batches, steps, ctx):        # trains on one batch of five
        return sgd_by_hand(module, [batches[0]], steps, ctx)

    with pytest.raises(ContractError, match="fn for client 0 in round 3: read 1 of its 5 batches") as e:
        ex.submit(TrainJob(0, 0, 3, 5, LocalSpec(w0, TrainFunction(lazy_loop)), 8)).value()
    assert e.value.round == 3 and "train function 'train_fn:lazy_loop' (function " in str(e.value)


def test_pieces_must_be_hashable_values():
    @dataclass
    class Mutable(LossTerm):
        def __call__(self, w, ctx):
            return w.sum()

    with pytest.raises(TypeError, match="frozen=True"):
        LocalRule(terms=(Mutable(),))
    with pytest.raises(TypeError, match="not a LossTerm"):
        LocalRule(terms=(ClipNorm(1.0),))
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        OptimizerRule(optimizer=dict)


# ------------------------------------------------------------------ runs, at every depth
class FnFedAvg(FedAvg):
    """FedAvg with a user loop, client by client (its local_spec is its own: no cohort), so a
    late client's job is submitted and left unread."""

    name = "test_fn_fedavg"

    def local_spec(self, client, t, received):
        return LocalSpec(start=received.vectors[0], rule=TrainFunction(sgd_by_hand))


register("algorithm", "test_fn_fedavg", FedAvgParams, "test: FedAvg with a user training loop", FnFedAvg)


def late_fleet(algo: dict, executor="batched") -> dict:
    """6 clients, all selected; 2 slow ones miss first_k = 4 every round (closed at 0.5 s, when
    they have done 4 steps of 0.12 s): their jobs are never computed, their steps are
    accounted in virtual time."""
    sc = tiny(**{"executor": {"name": executor, "dtype": "float64"}})
    sc["clients"]["groups"] = [
        {"name": "fast", "count": 4, "compute": {"model": "constant", "step_time": 0.1}, "network": "instant"},
        {"name": "slow", "count": 2, "compute": {"model": "constant", "step_time": 0.12}, "network": "instant"}]
    sc["protocol"] = {"name": "rounds", "select": {"model": "all"}, "local_steps": 5,
                      "wait": {"mode": "first_k", "k": 4}}
    sc["algorithm"] = algo
    return sc


@pytest.mark.parametrize("algo,kind,path", [
    ({"name": "fedavg_clip", "lr": 0.1, "max_norm": 0.5}, "local_sgd+ClipNorm", "batched"),
    ({"name": "local_adam", "lr": 0.01}, "optimizer:Adam", "sequential"),
    ({"name": "test_fn_fedavg", "lr": 0.1}, "train_fn:sgd_by_hand", "sequential"),
    ({"name": "feddyn", "lr": 0.1, "alpha": 0.1}, "local_sgd+FedDynTerm", "batched")])
def test_every_depth_keeps_laziness_and_step_accounting(run_in, algo, kind, path):
    example("grad_clip"), example("local_adam"), example("feddyn")
    s = run_in(late_fleet(algo)).summary
    assert s["grad_steps_computed"] == 3 * 4 * 5 and s["grad_steps_skipped"] == 3 * 2 * 4
    assert s["grad_steps_computed"] + s["grad_steps_skipped"] == s["grad_steps_virtual"]
    paths = s["executor_paths"]
    assert list(paths) == [f"{algo['name']}/{kind}"] and list(paths[f"{algo['name']}/{kind}"]) == [path]
    entry = paths[f"{algo['name']}/{kind}"][path]
    assert entry["jobs"] == s["jobs_computed"] == 12 and entry["steps"] == s["grad_steps_computed"]


def test_grad_clip_batched_equals_sequential_run(run_in):
    example("grad_clip")
    algo = {"name": "fedavg_clip", "lr": 0.1, "max_norm": 0.2}
    a = run_in(late_fleet(algo, "sequential"), name="s")
    b = run_in(late_fleet(algo, "batched"), name="b")
    assert np.allclose(np.load(b.run_dir / "model.npy"), np.load(a.run_dir / "model.npy"), rtol=1e-6, atol=1e-7)
    plain = run_in(late_fleet({"name": "fedavg", "lr": 0.1}, "sequential"), name="p")
    assert not np.allclose(np.load(plain.run_dir / "model.npy"), np.load(a.run_dir / "model.npy"), atol=1e-4)


# ------------------------------------------------------------------ the example plugins
def test_dp_sgd_without_noise_and_clip_is_fedavg(run_in):
    sc = tiny(**{"executor": {"name": "batched", "dtype": "float64"}})
    sc["algorithm"] = {"name": "dp_sgd", "lr": 0.1, "noise_multiplier": 0.0, "clip": 1e6}
    dp = run_in(sc, name="dp")
    sc["algorithm"] = {"name": "fedavg", "lr": 0.1}
    ref = run_in(sc, name="ref")
    np.testing.assert_allclose(dp.metrics["test_loss"], ref.metrics["test_loss"], rtol=1e-10)
    np.testing.assert_allclose(np.load(dp.run_dir / "model.npy"), np.load(ref.run_dir / "model.npy"), rtol=1e-6)
    assert dp.summary["dp"]["noise_multiplier"] == 0.0 and dp.summary["dp"]["clip_norm"] == 1e6
    assert "dp_sgd/local_sgd+ClipPerSample+DPGaussianNoise" in dp.summary["executor_paths"]


def test_dp_sgd_records_its_privacy_parameters_and_is_reproducible(run_in):
    sc = tiny(**{"executor": {"name": "sequential", "dtype": "float64"}})
    sc["algorithm"] = {"name": "dp_sgd", "lr": 0.1, "noise_multiplier": 1.1, "clip": 0.5}
    a = run_in(sc, name="a")
    sc["executor"]["name"] = "batched"
    b = run_in(sc, name="b")
    s = json_summary(a.run_dir)
    assert s["dp"] == {"mechanism": "DP-SGD local steps: per-sample clipping, Gaussian noise",
                       "clip_norm": 0.5, "noise_multiplier": 1.1}
    np.testing.assert_allclose(b.metrics["test_loss"], a.metrics["test_loss"], rtol=1e-9)


def json_summary(run_dir):
    import json
    return json.loads((run_dir / "summary.json").read_text())


def feddyn_reference(A, b, mu, rounds, steps, lr, alpha, participants):
    """FedDyn (Acar et al. 2021, Alg. 1) in NumPy on F_k(w) = 1/2 w'A_k w - b_k'w + mu/2 |w|^2,
    full-batch local gradient steps on F_k(w) - <g_k, w> + alpha/2 |w - w_t|^2."""
    n, d = b.shape
    w, h, gk = np.zeros(d), np.zeros(d), np.zeros((n, d))
    out = []
    for t in range(rounds):
        thetas = {}
        for k in participants[t]:
            v = w.copy()
            for _ in range(steps):
                v = v - lr * (A[k] @ v - b[k] + mu * v - gk[k] + alpha * (v - w))
            thetas[k] = v
        for k, v in thetas.items():
            gk[k] = gk[k] - alpha * (v - w)
        h = h - alpha / n * sum(v - w for v in thetas.values())
        w = np.mean(list(thetas.values()), axis=0) - h / alpha
        out.append(w.copy())
    return out


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_feddyn_matches_numpy_reference_on_the_quadratic(run_in, executor):
    from emulator.workloads.datasets import quadratic_problem_dense
    example("feddyn")
    n, rounds, steps, lr, alpha = 6, 8, 5, 0.05, 0.3
    sc = quadratic_scenario(n=n, rounds=rounds, steps=steps, lr=lr, algo="feddyn", k=3, alpha=alpha)
    sc["executor"]["name"] = executor
    res = run_in(sc)
    clients = pd.read_csv(res.run_dir / "clients.csv")
    parts = [sorted(g.loc[g.selected, "client"]) for _, g in clients.groupby("round")]
    A, b, _, _, F = quadratic_problem_dense(n, 4, 0.01)
    ws = feddyn_reference(A, b, 0.01, rounds, steps, lr, alpha, parts)
    f_emu = res.metrics.loc[res.metrics["round"] >= 1, "test_loss"].to_numpy()
    np.testing.assert_allclose(f_emu, [F(w) for w in ws], rtol=1e-9)
    fedavg = run_in(quadratic_scenario(n=n, rounds=rounds, steps=steps, lr=lr, k=3), name="fedavg")
    assert not np.allclose(fedavg.metrics["test_loss"], res.metrics["test_loss"], rtol=1e-3)
    assert "feddyn/local_sgd+FedDynTerm" in res.summary["executor_paths"]
