"""T20 (tsfl.md 3.4): the gradient probes behind the `estimate` mode of Eq.(6)'s constants."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from emulator.compute.executor import SequentialExecutor, TaskData
from emulator.compute.flat import FlatModel
from emulator.compute.jobs import LocalRule, LocalSpec, TrainJob, probe_estimates
from emulator.rng import Streams


class HalfSquare(nn.Module):
    """f(w; x) = 1/2 a w^2 - x w  (1-D; a sample's x is noise), loss 'direct'."""

    loss = "direct"

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
    ex = SequentialExecutor({0: TaskData(net, x, y, [torch.arange(64)])}, Streams(3), torch.device("cpu"))
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
    ex2 = SequentialExecutor({0: TaskData(net, x, y, [torch.arange(64)])}, Streams(3), torch.device("cpu"))
    plain = ex2.submit(TrainJob(0, 0, 1, 4, LocalSpec(net.initial_vector(), LocalRule(lr=0.05)), 8)).value()
    assert torch.equal(plain.params, res.params)


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


def test_T20_dms_estimate_mode_reads_probes_in_a_run(tmp_path):
    from emulator.runner import run
    from emulator.scenario import load
    sc = load("scenarios/papers/tsfl_case2_dms.yaml", overrides=["run.rounds=3"])
    assert sc.algorithm.constants.mode == "estimate"
    res = run(sc, out=tmp_path / "run")
    # every uploader probes (tsfl.md 3.4): 3 gradients each, apart from its local steps
    s = res.summary
    assert s["probe_grad_evals"] == 3 * 20 * 3
    assert s["grad_steps_computed"] <= s["grad_steps_virtual"]
    m = res.metrics[res.metrics["round"] > 0]
    assert (m["G2_hat"] > 0).all() and (m["sigma2_hat"] > 0).all() and (m["L_hat"] > 0).all()
    # EMA (lambda 0.9) of raw values: G2 moves by at most 10% of the gap per interval
    assert np.isfinite(m["slope"]).all()


def test_sigma2_unit_sample_scales_the_estimate_by_the_batch(tmp_path):
    """sigma2_unit: sample reads sigma^2 as a one-sample variance: B = 32 x the batch estimate
    (same probes in interval 1, before the weights differ)."""
    from emulator.runner import run
    out = {}
    for unit in ("batch", "sample"):
        res = run("scenarios/papers/tsfl_case2_dms.yaml", overrides=["run.rounds=1", f"algorithm.constants.sigma2_unit={unit}"],
                  out=tmp_path / unit)
        out[unit] = res.metrics.set_index("round").loc[1]
    assert out["sample"]["sigma2_hat"] == pytest.approx(32 * out["batch"]["sigma2_hat"], rel=1e-12)
    assert out["sample"]["G2_hat"] == out["batch"]["G2_hat"]
    assert out["sample"]["slope"] == pytest.approx(out["batch"]["slope"] / 32, rel=1e-12)
