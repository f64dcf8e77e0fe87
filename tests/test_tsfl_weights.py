"""T-SFL weights (issue 15): Def. 1.3's cap rho_i <= theta/N (`cap_theta`), the fixed-constant
and direct (`mode: slope`) slopes of Eq.(6) against hand-computed weights, the per-interval
record of how many survivors kept a weight (metrics.csv `weighted`, `max_weight`, `slope_n`),
the paper scenarios' fixed default, and the sign of Eq.(6) derived from Theorem 1
(docs/tsfl_sign.py)."""
import copy
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from emulator.scenario import schema as scenario
from emulator.algorithms import tsfl as T
from emulator.algorithms.base import AlgoContext, Arrival
from conftest import tiny

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the capped water-fill
def test_capped_waterfill_hand_values():
    # tau = [1, 2, 4, 5], s = 0.1: uncapped [.05, .15, .35, .45]; cap 0.4 holds the last at 0.4 and
    # the others share 0.6 with slope s: 3c + 0.7 = 0.6 -> c = -1/30 -> [1/15, 1/6, 11/30, 2/5]
    assert np.allclose(T.capped_waterfill([1, 2, 4, 5], 0.1, 0.4), [1 / 15, 1 / 6, 11 / 30, 2 / 5], atol=1e-12)
    # tau = [0, 1, 4, 5], s = 0.15: water-filling alone gives [0, 0, .425, .575]; cap 0.4 holds both
    # tops, and the rest 0.2 = c + (c + 0.15) -> c = 0.025: the clients at 0 come back in
    assert np.allclose(T.waterfill([0, 1, 4, 5], 0.15), [0, 0, .425, .575], atol=1e-12)
    assert np.allclose(T.capped_waterfill([0, 1, 4, 5], 0.15, 0.4), [1 / 40, 7 / 40, 2 / 5, 2 / 5], atol=1e-12)
    # a cap that does not bind changes nothing; cap = 1/n gives uniform weights
    assert np.allclose(T.capped_waterfill([1, 2, 4, 5], 0.1, 0.45), [.05, .15, .35, .45], atol=1e-12)
    assert np.allclose(T.capped_waterfill([1, 2, 4, 5], 0.3, 0.25), [.25] * 4, atol=1e-12)
    with pytest.raises(ValueError):
        T.capped_waterfill([1, 2, 4, 5], 0.1, 0.2)             # 4 x 0.2 < 1


def test_capped_waterfill_properties():
    """Random tau, s (either sign), cap in [1/n, 1]: weights in [0, cap], sum 1, slope s between
    every two clients strictly inside (0, cap), and clients at the cap have the largest s tau."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 10))
        tau, s = rng.integers(0, 9, n), rng.uniform(-0.5, 0.5)
        cap = rng.uniform(1 / n, 1)
        rho = T.capped_waterfill(tau, s, cap)
        assert (rho >= 0).all() and (rho <= cap + 1e-12).all() and abs(rho.sum() - 1) < 1e-12
        inner = np.flatnonzero((rho > 1e-12) & (rho < cap - 1e-12))
        for i in inner:
            for j in inner:
                assert abs((rho[i] - rho[j]) - s * (tau[i] - tau[j])) < 1e-12
        if cap >= 1:                                            # no cap in force: plain water-filling
            assert np.allclose(rho, T.waterfill(tau, s), atol=1e-12)


def test_waterfill_negative_slope_hand_values():
    # s < 0 favours small tau: tau = [2, 3, 5], s = -0.25: 1/3 - 0.25 (5 - 10/3) < 0, so the top
    # two by s tau (tau = 2, 3) share: c = (1 + 1.25)/2 = 1.125 -> [0.625, 0.375, 0]
    assert np.allclose(T.waterfill([2, 3, 5], -0.25), [0.625, 0.375, 0], atol=1e-12)
    assert np.allclose(T.waterfill([2, 3, 5], -0.1), [1 / 3 + 2 / 15, 1 / 3 + 1 / 30, 1 / 3 - 1 / 6], atol=1e-12)


# --------------------------------------------------------------------------- one hand-made interval
# Six candidates tau = [0, 0, 0, 2, 3, 5], zero_tau: exclude: K = 10/6, so tau = 2, 3, 5 are never
# dropped and the three zeros always are: S = {3, 4, 5}, n_U = 6, H = 5, whatever the draws.
# Fixed constants eta = 0.1, L = 9, G2 = sigma2 = 1: s = 0.1 * 9 * 4 / (2 * 6) = 0.3 (s n_U = 1.8);
# on S (mean tau 10/3): 1/3 + 0.3 (2 - 10/3) < 0, so water-filling keeps tau = 3, 5:
# c = (1 - 0.3 * 8)/2 = -0.7 -> rho = [0.2, 0.8]: 3 survivors, 2 weighted, largest weight 0.8.
TAU = [0, 0, 0, 2, 3, 5]
FIXED = {"mode": "fixed", "L": 9.0, "G2": 1.0, "sigma2": 1.0}


def make_dms(constants, **kw):
    p = scenario.member("algorithm", "dms", lr=0.1, constants=constants, zero_tau="exclude", **kw)
    ctx = AlgoContext(0, 2, 6, np.ones(6), torch.zeros(2, dtype=torch.float64), np.random.default_rng(0))
    return T.DMS(p, ctx)


def interval(dms, tau=TAU):
    arr = [Arrival(i, 0, [torch.tensor([float(i), 1.0], dtype=torch.float64)], 10, 1, 0.0, meta={"tau": t})
           for i, t in enumerate(tau)]
    dms.reads(0, arr)
    agg = dms.aggregate(0, arr)
    return np.array([agg.weights[i] for i in range(len(tau))]), agg.round_cols


@pytest.mark.parametrize("constants,expected,cols", [
    (FIXED, [0, 0, 0, 0, 0.2, 0.8], {"slope": 0.3, "slope_n": 1.8, "weighted": 2, "max_weight": 0.8}),
    ({"mode": "slope", "s": 0.3}, [0, 0, 0, 0, 0.2, 0.8], {"slope": 0.3, "weighted": 2, "max_weight": 0.8}),
    ({"mode": "slope", "s": 0.1}, [0, 0, 0, 1 / 3 - 2 / 15, 1 / 3 - 1 / 30, 1 / 3 + 1 / 6],
     {"slope": 0.1, "slope_n": 0.6, "weighted": 3, "max_weight": 0.5}),
    ({"mode": "slope", "s": -0.25}, [0, 0, 0, 0.625, 0.375, 0], {"slope": -0.25, "weighted": 2, "max_weight": 0.625}),
])
def test_fixed_and_direct_slope_hand_weights(constants, expected, cols):
    rho, rc = interval(make_dms(constants))
    np.testing.assert_allclose(rho, expected, atol=1e-12)
    assert rc["survivors"] == 3 and rc["H"] == 5
    for k, v in cols.items():
        assert rc[k] == pytest.approx(v, abs=1e-12), k
    assert "weight_cap" not in rc


def test_cap_theta_hand_weights():
    # theta = 3: cap 3/6 = 0.5 holds tau = 5 at 0.5; the others share 0.5 with slope 0.3:
    # (c + 0.6) + (c + 0.9) = 0.5 -> c = -0.5 -> [0.1, 0.4, 0.5]: all three survivors weighted
    rho, rc = interval(make_dms(FIXED, cap_theta=3.0))
    np.testing.assert_allclose(rho, [0, 0, 0, 0.1, 0.4, 0.5], atol=1e-12)
    assert (rc["weighted"], rc["max_weight"], rc["weight_cap"]) == (3, pytest.approx(0.5), pytest.approx(0.5))
    # theta = 1: 1/6 x 3 survivors < 1, relaxed to 1/|S| = 1/3: uniform on S
    rho, rc = interval(make_dms(FIXED, cap_theta=1.0))
    np.testing.assert_allclose(rho, [0, 0, 0, 1 / 3, 1 / 3, 1 / 3], atol=1e-12)
    assert rc["weight_cap"] == pytest.approx(1 / 3) and rc["weighted"] == 3
    # theta = 6: cap 1, no effect
    rho, rc = interval(make_dms(FIXED, cap_theta=6.0))
    np.testing.assert_allclose(rho, [0, 0, 0, 0, 0.2, 0.8], atol=1e-12)


def test_constants_and_cap_validation():
    with pytest.raises(Exception, match="mode slope needs s"):
        scenario.member("algorithm", "dms", lr=0.1, constants={"mode": "slope"})
    with pytest.raises(Exception, match="cap_theta needs clip: waterfill"):
        scenario.member("algorithm", "dms", lr=0.1, clip="none", cap_theta=2.0)


def hand_made_scenario(algo="dms", **algo_kw):
    """The interval above through the emulator, 3 times: six clients completing 0, 0, 0, 2, 3, 5
    one-batch iterations per 1 s interval (instant links)."""
    sc = tiny(**{"run.rounds": 3})
    sc["protocol"] = {"name": "intervals", "interval": 1.0, "iteration": "batch"}
    sc["algorithm"] = {"name": algo, "lr": 0.1, "constants": dict(FIXED), **algo_kw}
    sc["clients"] = {"count": 6, "groups": [
        {"name": f"c{i}", "count": 1, "compute": {"model": "iterations", "fixed": t}, "network": "instant"}
        for i, t in enumerate(TAU)]}
    return sc


def test_survivor_count_columns_in_metrics(run_in):
    res = run_in(hand_made_scenario(zero_tau="exclude"))
    m = res.metrics[res.metrics["round"] > 0]
    assert len(m) == 3
    assert (m["n_candidates"] == 6).all() and (m["survivors"] == 3).all()
    assert (m["weighted"] == 2).all()
    np.testing.assert_allclose(m["max_weight"], 0.8, atol=1e-12)
    np.testing.assert_allclose(m["slope"], 0.3, atol=1e-12)
    np.testing.assert_allclose(m["slope_n"], 1.8, atol=1e-12)
    c = pd.read_csv(res.run_dir / "clients.csv")
    c = c[c["round"] > 0]
    for _, g in c.groupby("round"):
        np.testing.assert_allclose(g.sort_values("client")["weight"], [0, 0, 0, 0, 0.2, 0.8], atol=1e-12)
    # with the cap (theta = 3) all three survivors keep a weight, the largest is 0.5
    res = run_in(hand_made_scenario(zero_tau="exclude", cap_theta=3.0), name="cap")
    m = res.metrics[res.metrics["round"] > 0]
    assert (m["weighted"] == 3).all() and (m["survivors"] == 3).all()
    np.testing.assert_allclose(m["max_weight"], 0.5, atol=1e-12)
    np.testing.assert_allclose(m["weight_cap"], 0.5, atol=1e-12)
    # tsfl_optimal (no filter) on all six: tau = [0,0,0,2,3,5], s = 0.3, water-filled to
    # [0, 0, 0, 0, 0.2, 0.8]: 6 candidates, all 6 "survive", 2 weighted
    res = run_in(hand_made_scenario("tsfl_optimal"), name="opt")
    m = res.metrics[res.metrics["round"] > 0]
    assert (m["survivors"] == 6).all() and (m["weighted"] == 2).all()
    np.testing.assert_allclose(m["max_weight"], 0.8, atol=1e-12)


# --------------------------------------------------------------------------- the paper scenarios' default
@pytest.mark.parametrize("name,eta", [("case1", 0.015), ("case2", 0.015), ("case3", 0.024), ("2it", 0.024), ("4it", 0.024)])
def test_paper_scenarios_default_to_mild_fixed_constants(name, eta):
    """The DMS paper scenarios use mode fixed, L = 4.5, G2 = sigma2 = 1 (README, T-SFL): s n_U =
    eta L (H - 1) / 2 = 0.10125 at Cases 1-2's H = 4 (eta 0.015) and 0.054 (H - 1) in Case 3."""
    sc = scenario.load(ROOT / "scenarios" / "papers" / f"tsfl_{name}_dms.yaml")
    a = sc.algorithm
    assert a.name == "dms" and a.lr == eta
    c = a.constants
    assert (c.mode, c.L, c.G2, c.sigma2) == ("fixed", 4.5, 1.0, 1.0)
    assert T.slope(a.lr, c.L, c.G2, c.sigma2, 20, 4) * 20 == pytest.approx(eta * 4.5 * 3 / 2, abs=1e-15)


# --------------------------------------------------------------------------- the sign of Eq.(6)
@pytest.mark.slow
def test_sign_of_eq6_from_theorem1():
    """docs/tsfl_sign.py: differentiating Theorem 1's bound gives Eq.(4) with the (A Gamma + C tau)
    term's sign flipped, hence rho_i - rho_j = -s (tau_i - tau_j); the bound grows along Eq.(6)'s
    tilt at uniform weights, and a numerical instance orders Phi(-s) < Phi(0) < Phi(+s)."""
    spec = importlib.util.spec_from_file_location("tsfl_sign", ROOT / "docs" / "tsfl_sign.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.derive()
    assert r["gradient_shape"] and r["stationary_is_ours"] and r["ours_minus_eq4_is_flip"]
    assert not r["stationary_is_eq4"]
    assert r["slope_sign"] == -1
    assert r["directional_formula"] and r["def13_signs"]
    assert r["instance_order"]
    # the instance against the emulator's own formulas: Eq.(4) (T.theorem2_weights, frozen D, F)
    # minus the stationary point is 2 (A Gamma + C tau)/(2 eta^2 N sigma^2), i.e. the two
    # differ by the sign of Eq.(6)'s slope: successive differences +s dtau vs -s dtau
    tau = np.array([1, 2, 3, 4, 4])
    kw = dict(eta=0.01, L=3, theta=1, G2=2, sigma2=0.5, N=5, H=4, Gamma=0.3, D=1.7, F_hat=0.9)
    paper = T.theorem2_weights(tau, **kw)
    s = T.slope(0.01, 3, 2, 0.5, 5, 4)
    A = 0.01 * (2 * 3 * (0.01 * 3 * 2 - 1) + 0.01)
    C = 0.01 ** 3 * 3 * 3 * 2
    ours = paper - (A * 0.3 + C * tau) / (0.01 ** 2 * 5 * 0.5)
    np.testing.assert_allclose(np.diff(paper), s * np.diff(tau), atol=1e-12)
    np.testing.assert_allclose(np.diff(ours), -s * np.diff(tau), atol=1e-12)
