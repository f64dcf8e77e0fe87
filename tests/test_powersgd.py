"""PowerSGD as a two-phase exchange (docs/algorithms/compression.md 2.6): the closed forms of
one exchange (a rank-r matrix comes back exactly; warm-started power iteration reaches the
best rank-r error; the error-feedback residual is M - P̂ Qᵢᵀ), the exact bytes of each
message, the second phase's seconds on a slow link, the engines, and bad blocks at their
YAML path."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

import emulator.api as api
from emulator import registry
from emulator.algorithms.state import ClientStates
from emulator.cli import app
from emulator.codecs.encoding import RESIDUAL, ExchangeEncoding
from emulator.codecs.exchange import ExchangeBytes, Layout
from emulator.rng import Streams
from emulator.scenario.schema import member
from conftest import quadratic_scenario, tiny, two_links

pytestmark = pytest.mark.usefixtures("one_torch_thread")
F64 = torch.float64


def powersgd(**kw):
    return registry.get("codec", "powersgd").factory(member("codec", "powersgd", **kw))


def fp32(x):
    return x.to(torch.float32).to(F64)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ----------------------------------------------------------------------------- one exchange
def test_a_rank_r_matrix_comes_back_exactly_after_one_exchange():
    layout = Layout(((6, 5),))
    a = randn(6, 2, seed=1)
    ms = [a @ randn(2, 5, seed=s) for s in (2, 3)]            # two clients, one rank-2 column space
    c = powersgd(rank=2)
    q = c.initial_state(layout, np.random.default_rng(4))
    decoded, (q_next,) = c.exchange([m.reshape(-1) for m in ms], layout, q)
    for m, d in zip(ms, decoded):                             # P̂ spans col(A): P̂ P̂ᵀ M = M (fp32 on the wire)
        assert float((d.reshape(6, 5) - m).norm()) <= 1e-6 * float(m.norm())
    # the next Q is the mean of the clients' Q_i = M_iᵀ P̂, as sent (fp32)
    p = torch.stack([fp32(m @ q[0]) for m in ms]).mean(0)
    p1 = p[:, 0] / p[:, 0].norm()                             # Gram-Schmidt by hand
    w = p[:, 1] - (p1 @ p[:, 1]) * p1
    p_hat = fp32(torch.stack([p1, w / w.norm()], 1))
    assert torch.allclose(q_next, torch.stack([fp32(m.T @ p_hat) for m in ms]).mean(0), rtol=0, atol=1e-6)
    one, _ = powersgd(rank=1).exchange([ms[0].reshape(-1)], layout, [q[0][:, :1]])
    assert torch.linalg.matrix_rank(one[0].reshape(6, 5)) == 1


def test_warm_started_power_iteration_reaches_the_best_rank_r_error():
    # M = U diag(8, 4, 1, 0.5, 0.25) Vᵀ: the best rank-2 error is sqrt(1 + 0.25 + 0.0625) (Eckart-Young);
    # exchanges on the same M, each from the last Q, are subspace iteration: the error converges to it
    u = torch.linalg.qr(randn(6, 6, seed=5)).Q[:, :5]
    v = torch.linalg.qr(randn(5, 5, seed=6)).Q
    m = u @ torch.diag(torch.tensor([8.0, 4.0, 1.0, 0.5, 0.25], dtype=F64)) @ v.T
    best = math.sqrt(1 + 0.25 + 0.0625)
    layout, c = Layout(((6, 5),)), powersgd(rank=2)
    state, errs = c.initial_state(layout, np.random.default_rng(7)), []
    for _ in range(25):
        (d,), state = c.exchange([m.reshape(-1)], layout, state)
        errs.append(float((d.reshape(6, 5) - m).norm()))
    assert errs[0] > best * 1.01                              # one step from a random Q: not there yet
    assert errs[-1] == pytest.approx(best, rel=1e-5)


def test_a_zero_update_does_not_kill_the_shared_q():
    # a zero mean P gives P̂ = 0 and every Q_i = 0: the next Q keeps the previous columns, so
    # the next nonzero M is decoded (a zero Q would stay zero for ever)
    layout, c = Layout(((6, 5),)), powersgd(rank=2)
    q = c.initial_state(layout, np.random.default_rng(4))
    (d,), q1 = c.exchange([torch.zeros(30, dtype=F64)], layout, q)
    assert float(d.abs().sum()) == 0 and torch.equal(q1[0], q[0])
    m = randn(6, 2, seed=1) @ randn(2, 5, seed=2)
    (d,), _ = c.exchange([m.reshape(-1)], layout, q1)
    assert float((d.reshape(6, 5) - m).norm()) <= 1e-6 * float(m.norm())      # rank 2: exact again


def test_the_residual_is_the_update_less_the_clients_own_decoded_message():
    class Algo:                      # what an encoding reads of an algorithm: its state store and reference
        up_reference = "zero"
        states = ClientStates(3, 16, torch.device("cpu"), F64)

    layout = Layout(((4, 3), (4,)))                          # a 4 x 3 weight and 4 biases
    enc = ExchangeEncoding(powersgd(rank=1), Algo, Streams(0), 0, layout)
    for t, clients in ((1, (2, 0)), (2, (0,))):
        (q,) = enc.state
        us = {c: randn(16, seed=10 * t + c) for c in clients}
        ps = {c: us[c] + Algo.states.row(f"{RESIDUAL}.0", c) for c in clients}
        seen = dict(zip(clients, (v[0] for v in enc.encode_all(t, [(c, [us[c]], None) for c in clients]))))
        p = torch.stack([fp32(ps[c][:12].reshape(4, 3) @ q) for c in sorted(clients)]).mean(0)
        p_hat = fp32(p / p.norm())                            # rank 1: Gram-Schmidt is a normalisation
        for c in clients:
            want = p_hat @ fp32(ps[c][:12].reshape(4, 3).T @ p_hat).T
            assert torch.allclose(seen[c][:12].reshape(4, 3), want, rtol=0, atol=1e-12)
            assert torch.equal(seen[c][12:], ps[c][12:])      # the biases travel as they are
            e = Algo.states.row(f"{RESIDUAL}.0", c)
            assert torch.equal(e, ps[c] - seen[c])            # e = M - P̂ Q_iᵀ, bit for bit
            assert float(e[12:].abs().sum()) == 0
        assert float(Algo.states.row(f"{RESIDUAL}.0", 1).abs().sum()) == 0   # not read: untouched


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_exchange_on_cuda_stays_on_the_uploads_device_and_agrees_with_the_cpu(tmp_path):
    layout, c = Layout(((6, 5), (6,))), powersgd(rank=2)
    q = c.initial_state(layout, np.random.default_rng(4))                    # drawn on the CPU
    ps = [randn(36, seed=s) for s in (1, 2)]
    cpu, q_cpu = c.exchange(ps, layout, q)
    gpu, q_gpu = c.exchange([p.cuda() for p in ps], layout, q)
    assert all(d.device.type == "cuda" for d in gpu) and q_gpu[0].device.type == "cuda"
    for a, b in zip(cpu, gpu):
        assert torch.allclose(b.cpu(), a, rtol=0, atol=1e-12)
    again, _ = c.exchange([p.cuda() for p in ps], layout, q_gpu)              # the state, kept on cuda, is used there
    assert torch.allclose(again[0].cpu(), c.exchange(ps, layout, q_cpu)[0][0], rtol=0, atol=1e-12)
    runs = {}
    for dev in ("cpu", "cuda"):                                                # a run: uploads and residuals on cuda
        sc = tiny(**{"network.codec": {"up": {"name": "powersgd", "rank": 1}}, "executor": {"name": "sequential", "device": dev}})
        api.run(sc, out=tmp_path / dev)
        assert json.load(open(tmp_path / dev / "summary.json"))["status"] == "complete"
        runs[dev] = np.load(tmp_path / dev / "model.npy")
    assert np.allclose(runs["cuda"], runs["cpu"], atol=1e-4)


# ----------------------------------------------------------------------------- bytes
def test_exact_bytes_of_each_message_for_a_hand_sized_model(tmp_path):
    conv = ((20, 10, 5, 5), (20,), (50, 320), (50,), (3, 100), (6, 5))
    # matrices 20 x 250 (r 4), 50 x 320 (r 4) compressed; 3 x 100 (r = min(4, 3) = 3: 3 x 103 >= 300
    # values) and 6 x 5 (4 x 11 >= 30) travel as they are, with the vectors: 20 + 50 + 300 + 30
    p, q = 4 * (20 * 4 + 50 * 4), 4 * (250 * 4 + 320 * 4)
    assert powersgd(rank=4).exchange_bytes(Layout(conv), 4) == ExchangeBytes(q, p + 4 * 400, p, q)
    assert powersgd(rank=4).exchange_bytes(Layout(conv, vectors=2, extra=30), 2) == \
        ExchangeBytes(2 * q, 2 * p + 2 * (800 + 30), 2 * p, 2 * q)
    # rank 2 on the 6 x 5: 2 x 11 < 30, compressed (at 3, 33 >= 30: as it is)
    assert powersgd(rank=2).exchange_bytes(Layout(((6, 5),)), 4) == ExchangeBytes(4 * 10, 4 * 12, 4 * 12, 4 * 10)
    assert powersgd(rank=3).exchange_bytes(Layout(((6, 5),)), 4) == ExchangeBytes(0, 4 * 30, 0, 0)
    m = randn(30, seed=1)
    (d,), state = powersgd(rank=3).exchange([m], Layout(((6, 5),)), [])
    assert torch.equal(d, m) and state == []                  # sent as it is, no Q kept
    # a run: logreg on digits (a 10 x 64 weight, 10 biases), r = 2, 16 bytes of overhead a message
    out = tmp_path / "p"
    api.run(tiny(**{"network.codec": {"up": {"name": "powersgd", "rank": 2}}, "network.overhead_bytes": 16}), out=out)
    c = pd.read_csv(out / "clients.csv").query("selected")
    up1, back, up2, bcast = 80 + 40 + 16, 80 + 16, 512 + 16, 2600 + 512 + 16
    assert set(c.bytes_up) == {up1 + up2} and set(c.bytes_down) == {bcast + back}
    m = pd.read_csv(out / "metrics.csv").query("round > 0")
    assert (m.bytes_up == 3 * (up1 + up2)).all() and (m.bytes_down == 3 * (bcast + back)).all()
    assert json.load(open(out / "summary.json"))["status"] == "complete"      # the byte invariants held


# ----------------------------------------------------------------------------- time (two_links: conftest.py)
@pytest.mark.parametrize("engine", ["vector", "process"])
def test_a_slow_links_round_includes_the_extra_round_trip(tmp_path, engine):
    # the fast group downloads at 1 Mbit/s, the slow one uploads at 0.5 Mbit/s: each phase's
    # slowest client is another's, and T_2 is the slowest client's round trip, not max down + max up
    sc = two_links(**{"network.codec": {"up": {"name": "powersgd", "rank": 2}}, "protocol.engine": engine})
    sc["clients"]["groups"][0]["network"]["down_mbps"] = 1
    api.run(sc, out=tmp_path / "p")
    m = pd.read_csv(tmp_path / "p" / "metrics.csv").query("round > 0")
    c = pd.read_csv(tmp_path / "p" / "clients.csv").query("selected")
    down, up = {"fast": 1e6, "slow": 1e7}, {"fast": 1e7, "slow": 0.5e6}
    # phase 1: the model and Q (3112 bytes) down, 5 steps of 0.1 s, P and the biases (120 bytes) up
    first = {g: (0.01 + 3112 * 8 / down[g]) + 5 * 0.1 + (0.01 + 120 * 8 / up[g]) for g in down}
    second = {g: (0.01 + 80 * 8 / down[g]) + (0.01 + 512 * 8 / up[g]) for g in down}   # P̂ down, Q up
    assert first["fast"] > first["slow"] and second["slow"] > second["fast"]
    assert m.exchange_seconds.to_numpy() == pytest.approx(second["slow"], rel=0, abs=1e-12)
    assert m.round_time.to_numpy() == pytest.approx(first["fast"] + second["slow"], rel=0, abs=1e-12)
    slow = c[c.client >= 4]
    assert slow.comm_time.to_numpy() == pytest.approx(first["slow"] - 0.5, rel=0, abs=1e-12)   # comm_time: phase 1


@pytest.mark.parametrize("engine", ["vector", "process"])
def test_a_budget_that_ends_in_the_second_phase_aggregates_nothing_that_round(tmp_path, engine):
    # the server aggregates once the Q uploads are in: a run the time budget ends halfway
    # through round 2's second phase has one aggregation, and round 2 gives nobody a weight
    sc = two_links(**{"network.codec": {"up": {"name": "powersgd", "rank": 2}}, "protocol.engine": engine,
                      "run.rounds": 3})
    first = (0.01 + 3112 * 8 / 1e7) + 5 * 0.1 + (0.01 + 120 * 8 / 0.5e6)     # the slow group decides both phases
    second = (0.01 + 80 * 8 / 1e7) + (0.01 + 512 * 8 / 0.5e6)
    sc["run"]["virtual_time"] = 2 * first + 1.5 * second
    api.run(sc, out=tmp_path / "b")
    m = pd.read_csv(tmp_path / "b" / "metrics.csv").query("round > 0")
    c = pd.read_csv(tmp_path / "b" / "clients.csv")
    assert m["round"].tolist() == [1] and m.round_time.to_numpy() == pytest.approx(first + second, rel=0, abs=1e-12)
    assert (c.query("round == 1").weight > 0).sum() == 8 and (c.query("round == 2").weight == 0).all()
    assert json.load(open(tmp_path / "b" / "summary.json"))["status"] == "complete"      # the invariants held


def test_a_model_of_vectors_only_has_no_second_phase(tmp_path):
    # the quadratic model is one vector of d values: nothing to exchange, so no phase 2 (0 s, no
    # bytes); the round is the plain round: down and up d x 4 + 16 bytes, 2 steps of 1 s
    sc = quadratic_scenario(rounds=2, steps=2)
    sc["clients"]["groups"][0]["network"] = {"latency": 0.01, "up_mbps": 1, "down_mbps": 2}
    sc["network"] = {"codec": {"up": "powersgd"}, "overhead_bytes": 16}
    api.run(sc, out=tmp_path / "q")
    d = np.load(tmp_path / "q" / "model.npy").size
    nb = 4 * d + 16
    m = pd.read_csv(tmp_path / "q" / "metrics.csv").query("round > 0")
    c = pd.read_csv(tmp_path / "q" / "clients.csv")
    assert (m.exchange_seconds == 0).all() and set(c.bytes_up) == set(c.bytes_down) == {nb}
    assert (m.bytes_up == 6 * nb).all() and (m.bytes_down == 6 * nb).all()
    want = (0.01 + nb * 8 / 2e6) + 2 * 1.0 + (0.01 + nb * 8 / 1e6)
    assert m.round_time.to_numpy() == pytest.approx(want, rel=0, abs=1e-12)


@pytest.mark.parametrize("algo", ["fedavg", "scaffold"])
def test_powersgd_runs_are_the_same_bits_on_both_engines_and_close_across_executors(tmp_path, algo):
    # fedavg: cohorts (Rows); scaffold: client by client, two vectors per upload, relative to zero
    runs = {}
    for name, over in (("process", {"protocol.engine": "process"}), ("vector", {"protocol.engine": "vector"}),
                       ("batched", {"protocol.engine": "vector", "executor": {"name": "batched"}})):
        sc = tiny(**{"network.codec": {"up": {"name": "powersgd", "rank": 1}}, "run.rounds": 4,
                     "algorithm": {"name": algo, "lr": 0.1}, **over})
        api.run(sc, out=tmp_path / name)
        runs[name] = (pd.read_csv(tmp_path / name / "metrics.csv").drop(columns=["wall_time"]),
                      np.load(tmp_path / name / "model.npy"))
    pd.testing.assert_frame_equal(runs["process"][0], runs["vector"][0])
    assert np.array_equal(runs["process"][1], runs["vector"][1])
    assert np.allclose(runs["batched"][1], runs["vector"][1], atol=1e-5)
    plain = tmp_path / "plain"
    api.run(tiny(**{"run.rounds": 4, "algorithm": {"name": algo, "lr": 0.1}}), out=plain)
    assert not np.allclose(np.load(plain / "model.npy"), runs["vector"][1], atol=1e-4)   # rank 1 changed training


# ----------------------------------------------------------------------------- boundaries
DP_FEDAVG = {"name": "dp_fedavg", "lr": 0.1, "clip": 0.5, "noise_multiplier": 0.5, "clients_per_round": 3}
BAD = [({"network.codec": {"up": {"name": "powersgd", "rank": 0}}}, "network.codec.up.rank", "greater than or equal to 1"),
       ({"network.codec": {"down": "powersgd"}}, "network.codec.down", "on the download use one of"),
       ({"network.codec": {"up": "powersgd"}, "protocol": {"name": "async", "local_steps": 2},
         "algorithm": {"name": "fedasync", "lr": 0.1}}, "network.codec.up", "two-phase exchange, run by protocol.name rounds"),
       ({"network.codec": {"up": "powersgd"}, "secure_aggregation": {"protocol": "secagg"}}, "network.codec.up",
        "masking of its second phase is not modelled"),
       ({"network.codec": {"up": "powersgd"}, "network.server_link": {"up_mbps": 100, "down_mbps": 100}},
        "network.codec.up", "timed over dedicated client links"),
       ({"network.codec": {"up": "powersgd"}, "algorithm": DP_FEDAVG}, "network.codec.up",
        "bound on one client's clipped upload (its sensitivity) no longer holds")]


@pytest.mark.parametrize("over,path,words", BAD, ids=[b[1] + ":" + b[2][:14] for b in BAD])
def test_a_bad_powersgd_block_is_one_error_at_its_yaml_path(tmp_path, over, path, words):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(tiny(**over)))
    res = CliRunner().invoke(app, ["run", str(f), "--out", str(tmp_path / "runs" / "bad"), "-q"])
    assert res.exit_code == 2 and f"{path}:" in res.output and words in res.output, res.output
    assert not (tmp_path / "runs").exists()


def test_sample_level_dp_sgd_runs_under_powersgd_and_dp_fedavg_under_a_per_message_codec():
    # dp_sgd's privacy is local (each sample's gradient clipped on the client): the exchange is allowed
    api.load(tiny(**{"network.codec": {"up": "powersgd"}, "algorithm": {"name": "dp_sgd", "lr": 0.1}}))
    api.load(tiny(**{"network.codec": {"up": {"name": "qsgd", "s": 3}}, "algorithm": DP_FEDAVG}))
    with pytest.raises(api.ScenarioError, match="sensitivity"):
        api.load(tiny(**{"network.codec": {"up": "powersgd"}, "algorithm": DP_FEDAVG}))
