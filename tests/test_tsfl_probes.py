"""T20 (docs/algorithms/tsfl.md 3.4): the gradient probes behind the `estimate` mode of Eq.(6)'s constants."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from emulator.compute.executor import ClientRows, SequentialExecutor, TaskData
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob, probe_estimates
from emulator.rng import Streams
from emulator.workloads.models import DirectLoss


class HalfSquare(DirectLoss, nn.Module):
    """f(w; x) = 1/2 a w^2 - x w  (1-D; a sample's x is noise), a DirectLoss."""

    def __init__(self, a):
        super().__init__()
        self.a = a
        self.w = nn.Parameter(torch.tensor([0.7]))

    def forward(self, x):
        return 0.5 * self.a * self.w ** 2 - x[:, 0] * self.w


def test_T20_secant_curvature_of_a_1d_quadratic_is_exact():
    a = 3.5
    net = FlatModel(HalfSquare(a), torch.device("cpu"), torch.float64)
    torch.manual_seed(0)
    x = torch.randn(64, 1, dtype=torch.float64)
    y = torch.zeros(64, dtype=torch.long)
    ex = SequentialExecutor({0: TaskData(net, x, y, ClientRows([np.arange(64)], torch.device("cpu")))}, Streams(3), torch.device("cpu"))
    spec = LocalSpec(net.initial_vector(), LocalRule(lr=0.05), probe=True)
    fut = ex.submit(TrainJob(0, 0, 1, 4, spec, 8))
    probe = fut.probe.value()                      # a one-step job: training not computed yet
    assert abs(probe["L"] - a) < 1e-9
    # g_a, g_b, g_c; the probe's step is not one of the fleet's local steps
    assert ex.stats.probe_evals == 3 and ex.stats.grad_evals == 1 and not fut.done
    assert ex.stats.steps_computed == 0 and ex.stats.steps_submitted == 4
    res = fut.value()
    assert res.probe is None and ex.stats.grad_evals == 5 and ex.stats.steps_computed == 4
    # the probe does not change the training itself
    ex2 = SequentialExecutor({0: TaskData(net, x, y, ClientRows([np.arange(64)], torch.device("cpu")))}, Streams(3), torch.device("cpu"))
    plain = ex2.submit(TrainJob(0, 0, 1, 4, LocalSpec(net.initial_vector(), LocalRule(lr=0.05)), 8)).value()
    assert torch.equal(plain.params, res.params)


@pytest.mark.slow
def test_T20_sigma2_is_unbiased_for_the_gradient_noise():
    rng = np.random.default_rng(0)
    d, v = 10, 0.8
    grad = torch.as_tensor(rng.normal(size=d))
    est = []
    for _ in range(10_000):
        ga = grad + torch.as_tensor(rng.normal(scale=np.sqrt(v / d), size=d))
        gb = grad + torch.as_tensor(rng.normal(scale=np.sqrt(v / d), size=d))
        est.append(probe_estimates(ga, gb, ga, 0.1)["sigma2"])
    assert abs(np.mean(est) / v - 1) < 0.03
    # G2 estimates E|g|^2 = |grad|^2 + v
    p = probe_estimates(grad, grad, grad, 0.1)
    assert abs(p["G2"] - float(grad.norm() ** 2)) < 1e-9 and p["sigma2"] == 0 and p["L"] == 0
    assert probe_estimates(torch.zeros(3), torch.ones(3), torch.ones(3), 0.1)["L"] is None


# the paper scenario made cheap: an MLP instead of the CNN, 64 samples per client (two batches
# of 32); the probes, the EMA and Eq.(6) do not depend on either
SMALL = ["workload.model={name: mlp, hidden: 16}", "workload.partition.sizes.pattern=[64]"]


def ema_by_hand(raw, lam):
    """docs/algorithms/tsfl.md 3.4: X^t = lam X^{t-1} + (1 - lam) X_raw^t, X = X_raw at the first interval."""
    out = [raw[0]]
    for x in raw[1:]:
        out.append(lam * out[-1] + (1 - lam) * x)
    return out


def test_T20_dms_estimate_mode_reads_probes_in_a_run(tmp_path, monkeypatch):
    from emulator.algorithms import tsfl
    from emulator.runs.runner import run
    from emulator.scenario.schema import load
    # the paper scenarios default to fixed constants (issue 15); A8's estimate mode set here
    sc = load("scenarios/papers/tsfl_case2_dms.yaml", overrides=["run.rounds=3", "algorithm.constants.mode=estimate",
                                                                 *SMALL])
    assert sc.algorithm.constants.mode == "estimate" and sc.algorithm.constants.ema == 0.9
    # record the raw probe values the server receives in each interval
    seen = []
    original = tsfl.TsflOptimal.update_constants

    def spy(self, arrivals):
        seen.append([dict(a.meta["probe"]) for a in arrivals if a.meta.get("probe")])
        return original(self, arrivals)

    monkeypatch.setattr(tsfl.TsflOptimal, "update_constants", spy)
    res = run(sc, out=tmp_path / "run")
    # every uploader probes (docs/algorithms/tsfl.md 3.4): 3 gradients each, apart from its local steps
    s = res.summary
    assert s["probe_grad_evals"] == 3 * 20 * 3
    assert s["grad_steps_computed"] <= s["grad_steps_virtual"]
    m = res.metrics[res.metrics["round"] > 0]
    assert (m["G2_hat"] > 0).all() and (m["sigma2_hat"] > 0).all() and (m["L_hat"] > 0).all()
    # metrics.csv records the EMA (lambda 0.9) of the per-interval raw values max G2, mean sigma2, max L
    assert len(seen) == 3 and all(seen)
    raw_G2 = [max(p["G2"] for p in ps) for ps in seen]
    raw_s2 = [float(np.mean([p["sigma2"] for p in ps])) for ps in seen]
    raw_L = [max(p["L"] for p in ps) for ps in seen]
    np.testing.assert_allclose(m["G2_hat"], ema_by_hand(raw_G2, 0.9), rtol=1e-12)
    np.testing.assert_allclose(m["sigma2_hat"], ema_by_hand(raw_s2, 0.9), rtol=1e-12)
    np.testing.assert_allclose(m["L_hat"], ema_by_hand(raw_L, 0.9), rtol=1e-12)
    assert not np.allclose(m["G2_hat"].iloc[1:], raw_G2[1:])       # smoothing changed something
    # and the slope is Eq.(6) on the smoothed values, N = n_U (A9)
    want = sc.algorithm.lr * m["L_hat"] * (m["H"] - 1) * m["G2_hat"] / (2 * m["n_candidates"] * m["sigma2_hat"])
    np.testing.assert_allclose(m["slope"], want, rtol=1e-12)


def _probe_rule(ema, unit="batch", lr=0.1):
    from emulator.algorithms import tsfl
    from emulator.algorithms.base import AlgoContext
    params = tsfl.TsflParams(lr=lr, constants=tsfl.ConstantsParams(ema=ema, sigma2_unit=unit))
    ctx = AlgoContext(task=0, dim=1, num_clients=3, client_sizes=np.ones(3), x0=torch.zeros(1),
                      rng=np.random.default_rng(0))
    return tsfl.TsflOptimal(params, ctx)


def _arrivals(probes):
    from emulator.algorithms.base import Arrival
    return [Arrival(client=i, round=1, vectors=None, n_samples=1, steps=2, train_loss=0.0,
                    meta={"tau": 2, **({"probe": p} if p else {})}) for i, p in enumerate(probes)]


# four intervals of hand-made probes: raw (L, G2, sigma2) = max L, max G2, mean sigma2
PROBES = [
    [{"G2": 4.0, "sigma2": 1.0, "L": 2.0}, {"G2": 9.0, "sigma2": 3.0, "L": 5.0}, None],  # raw (5, 9, 2)
    [{"G2": 1.0, "sigma2": 0.5, "L": 1.0}, {"G2": 2.0, "sigma2": 1.5, "L": None}],       # raw (1, 2, 1)
    [None, None],                                                                         # nobody probed
    [{"G2": 20.0, "sigma2": 4.0, "L": None}],                                             # no L: L carried
]


def test_constants_are_the_ema_of_the_raw_probe_values():
    """docs/algorithms/tsfl.md 3.4 with lambda = 0.9, by hand: X = raw at the first interval, then
    0.9 X + 0.1 raw; carried when nobody probed; L_raw = the previous L when no probe had one."""
    rule = _probe_rule(ema=0.9)
    assert rule.constants_info() == {} and rule.slope([1, 4], [1, 4], 2, 4) == 0.0
    want = [(5.0, 9.0, 2.0),
            (0.9 * 5 + 0.1 * 1, 0.9 * 9 + 0.1 * 2, 0.9 * 2 + 0.1 * 1),      # (4.6, 8.3, 1.9)
            (4.6, 8.3, 1.9),
            (4.6, 0.9 * 8.3 + 0.1 * 20, 0.9 * 1.9 + 0.1 * 4)]               # (4.6, 9.47, 2.11)
    for probes, (L, G2, s2) in zip(PROBES, want):
        rule.update_constants(_arrivals(probes))
        got = rule.constants_info()
        assert got == pytest.approx({"L_hat": L, "G2_hat": G2, "sigma2_hat": s2}, rel=1e-12, abs=0)
    # Eq.(6) on the smoothed values: s = eta L (H - 1) G2 / (2 n sigma2)
    assert rule.slope([1, 4, 2], [1, 4, 2], 3, 4) == pytest.approx(0.1 * 4.6 * 3 * 9.47 / (2 * 3 * 2.11), rel=1e-12)


def test_constants_without_smoothing_are_the_raw_values():
    rule = _probe_rule(ema=0.0)
    want = [(5.0, 9.0, 2.0), (1.0, 2.0, 1.0), (1.0, 2.0, 1.0), (1.0, 20.0, 4.0)]
    for probes, (L, G2, s2) in zip(PROBES, want):
        rule.update_constants(_arrivals(probes))
        assert rule.constants_info() == pytest.approx({"L_hat": L, "G2_hat": G2, "sigma2_hat": s2}, rel=1e-12, abs=0)
    # sigma2_unit: sample multiplies each client's sigma2 by its batch size before the mean
    rule = _probe_rule(ema=0.9, unit="sample")
    rule.update_constants(_arrivals([{"G2": 1.0, "sigma2": 2.0, "L": 1.0, "batch": 32},
                                     {"G2": 1.0, "sigma2": 1.0, "L": 1.0, "batch": 8}]))
    assert rule.constants_info()["sigma2_hat"] == pytest.approx((64 + 8) / 2, rel=1e-12)


def test_sigma2_unit_sample_scales_the_estimate_by_the_batch(tmp_path):
    """sigma2_unit: sample reads sigma^2 as a one-sample variance: B = 32 x the batch estimate
    (same probes in interval 1, before the weights differ)."""
    from emulator.runs.runner import run
    out = {}
    for unit in ("batch", "sample"):
        res = run("scenarios/papers/tsfl_case2_dms.yaml", overrides=["run.rounds=1", "algorithm.constants.mode=estimate",
                                                                         f"algorithm.constants.sigma2_unit={unit}", *SMALL],
                  out=tmp_path / unit)
        out[unit] = res.metrics.set_index("round").loc[1]
    assert out["sample"]["sigma2_hat"] == pytest.approx(32 * out["batch"]["sigma2_hat"], rel=1e-12)
    assert out["sample"]["G2_hat"] == out["batch"]["G2_hat"]
    assert out["sample"]["slope"] == pytest.approx(out["batch"]["slope"] / 32, rel=1e-12)
