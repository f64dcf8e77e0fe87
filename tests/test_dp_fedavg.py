"""dp_fedavg (docs/algorithms/dp.md): clipping and noise read back from the aggregates and the
records, the adaptive clip's geometric update on a hand case, epsilon equal to a direct call
of dp-accounting, bad input, and runs identical across -j."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import tiny

from emulator.algorithms.base import AlgoContext, Arrival
from emulator.algorithms.dp_fedavg import DPFedAvg, update_noise_multiplier
from emulator.rng import Streams
from emulator.scenario.schema import member

D = 20_000                     # coordinates: the noise's sample std has a relative error of 1/sqrt(2 D) = 0.5 %


def algo(n=10, seed=0, **kw):
    p = member("algorithm", "dp_fedavg", **{"lr": 0.1, "clip": 1.0, "noise_multiplier": 0.0,
                                            "clients_per_round": 4, **kw})
    ctx = AlgoContext(task=0, dim=D, num_clients=n, client_sizes=np.full(n, 10), x0=torch.zeros(D, dtype=torch.float64),
                      rng=np.random.default_rng(0), streams=Streams(seed))
    return DPFedAvg(p, ctx)


def updates(norms, seed=1):
    """Update vectors of the given L2 norms (random directions), float64."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in norms:
        v = torch.randn(D, generator=g, dtype=torch.float64)
        out.append(v * (n / float(v.norm())))
    return out


def arrivals(vectors, x):
    return [Arrival(client=i, round=1, vectors=[x + v], n_samples=10, steps=1, train_loss=0.0)
            for i, v in enumerate(vectors)]


def test_updates_are_clipped_to_s_and_divided_by_the_fixed_denominator():
    """Without noise: x + (sum_k clip(Δ_k)) / m, m = clients_per_round (not the 3 arrivals)."""
    a = algo(noise_multiplier=0.0, clip=1.0, server_lr=1.0)
    v = updates([2.0, 0.5, 5.0])
    agg = a.aggregate(1, arrivals(v, a.x))
    want = (v[0] / 2.0 + v[1] + v[2] / 5.0) / 4
    assert float((a.x - want).abs().max()) < 1e-12
    assert agg.client_cols["dp_update_norm"] == pytest.approx({0: 2.0, 1: 0.5, 2: 5.0}, rel=1e-12)
    assert agg.round_cols["dp_clipped"] == 2 and agg.round_cols["dp_clip"] == 1.0
    assert agg.weights == {0: 0.25, 1: 0.25, 2: 0.25}


def test_noise_std_is_z_s_over_m_and_from_the_keyed_stream():
    """The noise on the mean, m (x_new - x) - sum clip(Δ_k), has std z S (20 000 coordinates,
    fixed seed: bound 5 sigma of the sample std), mean 0, and is the keyed stream's draw exactly."""
    z, S, m = 1.3, 0.7, 4
    a = algo(noise_multiplier=z, clip=S)
    v = updates([0.2, 3.0])
    agg = a.aggregate(5, arrivals(v, a.x))
    noise = m * a.x - (v[0] + v[1] * (S / 3.0))
    sd = float(noise.std())
    assert abs(sd / (z * S) - 1) < 5 / math.sqrt(2 * D)
    assert abs(float(noise.mean())) < 5 * z * S / math.sqrt(D)
    assert agg.round_cols["dp_noise_std"] == pytest.approx(z * S / m, rel=1e-12)
    draw = Streams(0).keyed("dp_aggregate", 0, 5).standard_normal(D)
    assert float((noise / (z * S) - torch.from_numpy(draw)).abs().max()) < 1e-9
    b = algo(noise_multiplier=z, clip=S, seed=1)        # another seed, other noise
    b.aggregate(5, arrivals(v, b.x))
    assert float((b.x - a.x).abs().max()) > 0.1


def test_the_cohort_rows_give_the_same_model_as_the_arrivals():
    from emulator.algorithms.base import Rows
    v = updates([0.5, 2.0, 5.0])
    a, b = algo(noise_multiplier=0.9), algo(noise_multiplier=0.9)
    a.aggregate(2, arrivals(v, a.x))
    rows = Rows(clients=np.arange(3), n_samples=np.full(3, 10), steps=np.ones(3, np.int64),
                params=[b.x + u for u in v], train_loss=np.zeros(3))
    b.aggregate_rows(2, rows)
    assert torch.equal(a.x, b.x)


def test_adaptive_clip_follows_the_geometric_update_on_a_hand_case():
    """S_1 = 1, norms 0.5, 2, 0.9 -> 2 unclipped; b̄ = (2 + σ_b ξ) / m with ξ the keyed stream's
    draw after the update's D normals; S_2 = S_1 exp(-η_C (b̄ - γ)); the update's noise
    multiplier is (z^-2 - (2 σ_b)^-2)^-1/2 (dp.md Eq. 2.1-2.4)."""
    z, sb, eta, gamma, m = 0.8, 2.0, 0.3, 0.6, 4
    a = algo(noise_multiplier=z, clip=1.0, adaptive={"quantile": gamma, "lr": eta, "bit_noise": sb})
    agg = a.aggregate(3, arrivals(updates([0.5, 2.0, 0.9]), a.x))
    g = Streams(0).keyed("dp_aggregate", 0, 3)
    g.standard_normal(D)
    b_bar = (2 + sb * g.standard_normal()) / m
    assert agg.round_cols["dp_unclipped_noised"] == pytest.approx(b_bar, rel=1e-12)
    assert a.clip_norm == pytest.approx(math.exp(-eta * (b_bar - gamma)), rel=1e-12)
    z_delta = (z ** -2 - (2 * sb) ** -2) ** -0.5
    assert a.z_update == pytest.approx(z_delta, rel=1e-12) and z_delta > z
    assert agg.round_cols["dp_noise_std"] == pytest.approx(z_delta * 1.0 / m, rel=1e-12)
    s2 = a.clip_norm
    agg2 = a.aggregate(4, arrivals(updates([0.5, 2.0, 0.9]), a.x))
    assert agg2.round_cols["dp_clip"] == s2                     # round 4 clips with S_2
    assert update_noise_multiplier(z, None) == z


def direct_epsilon(q, z, t, delta):
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp
    acc = rdp.RdpAccountant()
    event = dp_event.GaussianDpEvent(z) if q == 1 else dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z))
    acc.compose(event, t)
    return acc.get_epsilon(delta)


def dp_scenario(**algo_kw):
    return tiny(**{"run.rounds": 4, "algorithm": {"name": "dp_fedavg", "lr": 0.1, "clip": 0.5,
                                                  "noise_multiplier": 1.1, "clients_per_round": 3,
                                                  "delta": 1e-4, **algo_kw}})


def test_epsilon_per_round_equals_a_direct_call_of_dp_accounting(run_in):
    """q = clients_per_round / N = 3 / 6; z = 1.1; delta 1e-4; every round t in metrics.csv."""
    r = run_in(dp_scenario())
    m = r.metrics[r.metrics["round"] > 0]
    assert list(m["round"]) == [1, 2, 3, 4]
    for t, eps_p, eps_n in zip(m["round"], m["dp_epsilon_poisson"], m["dp_epsilon_noamp"]):
        assert eps_p == direct_epsilon(0.5, 1.1, int(t), 1e-4)
        assert eps_n == direct_epsilon(1.0, 1.1, int(t), 1e-4)
        assert eps_p < eps_n
    s = r.summary
    assert s["dp_delta"] == 1e-4 and s["dp"]["q"] == 0.5 and s["dp"]["rounds_accounted"] == 4
    assert s["dp"]["dp_epsilon_poisson"] == direct_epsilon(0.5, 1.1, 4, 1e-4)


def test_adaptive_clipping_accounts_the_total_multiplier_and_pld_matches_the_library(run_in):
    """With adaptive clipping the accountant reads z (the pair's multiplier, dp.md Eq. 2.4),
    not z_Δ; `pld: true` adds the final epsilon of the library's PLD accountant."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant as pld
    r = run_in(dp_scenario(adaptive={"bit_noise": 1.0}, pld=True))
    m = r.metrics[r.metrics["round"] > 0]
    assert m["dp_epsilon_poisson"].iloc[-1] == direct_epsilon(0.5, 1.1, 4, 1e-4)
    assert m["dp_clip"].nunique() == 4                                 # the norm moves every round
    want = {}
    for key, event in (("pld_epsilon_poisson", dp_event.PoissonSampledDpEvent(0.5, dp_event.GaussianDpEvent(1.1))),
                       ("pld_epsilon_noamp", dp_event.GaussianDpEvent(1.1))):
        acc = pld.PLDAccountant()
        acc.compose(event, 4)
        want[key] = acc.get_epsilon(1e-4)
    assert {k: r.summary["dp"][k] for k in want} == want
    assert want["pld_epsilon_poisson"] < m["dp_epsilon_poisson"].iloc[-1]     # PLD is the tighter


def test_records_give_the_clip_norms_and_the_clients_norms(run_in):
    """clients.csv's dp_update_norm of the aggregated clients; dp_clipped counts those above dp_clip."""
    r = run_in(dp_scenario(clip=0.3))
    cl = pd.read_csv(r.run_dir / "clients.csv")
    for t, row in r.metrics[r.metrics["round"] > 0].set_index("round").iterrows():
        norms = cl[(cl["round"] == t) & (cl["weight"] > 0)]["dp_update_norm"]
        assert len(norms) == 3 and norms.notna().all()
        assert row["dp_clipped"] == int((norms > row["dp_clip"]).sum())
        assert row["dp_noise_std"] == pytest.approx(1.1 * 0.3 / 3, rel=1e-12)


def test_without_noise_and_clipping_dp_fedavg_is_uniform_fedavg(run_in):
    sc = dp_scenario(noise_multiplier=0.0, clip=1e6)
    sc["executor"] = {"name": "sequential", "dtype": "float64"}
    dp = run_in(sc, name="dp")
    sc["algorithm"] = {"name": "fedavg", "lr": 0.1, "weighting": "uniform"}
    ref = run_in(sc, name="ref")
    np.testing.assert_allclose(np.load(dp.run_dir / "model.npy"), np.load(ref.run_dir / "model.npy"), rtol=1e-9, atol=1e-12)
    assert math.isinf(dp.metrics["dp_epsilon_poisson"].iloc[-1])


@pytest.mark.parametrize("over, path, says", [
    ({"clients_per_round": 7}, "algorithm.clients_per_round", "clients.count is 6"),
    ({"adaptive": {"bit_noise": 0.5}}, "algorithm.adaptive.bit_noise", "2 * bit_noise > noise_multiplier"),
    ({"delta": 1.5}, "algorithm.delta", "less than 1"),
])
def test_bad_dp_input_names_its_yaml_path(over, path, says, tmp_path):
    import emulator
    with pytest.raises(emulator.ScenarioError) as e:
        emulator.run(dp_scenario(**over), out=tmp_path / "x")
    assert path in str(e.value) and says in str(e.value)
    assert not (tmp_path / "x").exists()


def test_dp_fedavg_runs_are_identical_across_j(tmp_path):
    """A sweep of two seeds with -j 1 and -j 2 (separate worker processes): the same metrics and models."""
    from emulator.sweep import load_spec, run_sweep
    out = {}
    for j in (1, 2):
        spec = load_spec({"name": f"dpj{j}", "base": dp_scenario(adaptive={"bit_noise": 1.0}), "seeds": 2,
                          "out": str(tmp_path / f"j{j}")})
        run_sweep(spec, workers=j)
        runs = sorted((tmp_path / f"j{j}" / "runs").iterdir())
        out[j] = [(pd.read_csv(d / "metrics.csv").drop(columns="wall_time"), np.load(d / "model.npy")) for d in runs]
    assert len(out[1]) == 2
    for (m1, x1), (m2, x2) in zip(out[1], out[2]):
        pd.testing.assert_frame_equal(m1, m2)
        assert np.array_equal(x1, x2)
    assert not np.array_equal(out[1][0][1], out[1][1][1])       # the two seeds differ
