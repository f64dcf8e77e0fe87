"""The baselines of the FedSUM comparison (docs/algorithms/fedsum.md section 4): FedAU's weights (T10),
FedAWE's echo multipliers (T11) and one test per public-implementation trap of section 4.1.
Quadratic of docs/algorithms/fedsum.md 8 (N = 3, d = 2), float64, exact gradients; spec rounds 0-based
(the emulator's round t is the spec's t - 1)."""
import numpy as np
import pandas as pd
import pytest
import torch

import emulator
from emulator.algorithms.base import AlgoContext, Arrival
from emulator.compute.jobs import TrainResult
from emulator.compute.lazy import Lazy
from emulator.scenario.schema import member
from emulator import registry
from reference import fedsum_reference as ref
from reference.fedsum_harness import algo_block, quad_scenario, reference, run_world

SEQ = ref.SEQ


class Done(Lazy):
    """A job future that has already run (unit tests of an algorithm's verbs)."""

    def __init__(self, value):
        super().__init__()
        self._set(value)


def make(name, N=3, d=2, **params):
    ctx = AlgoContext(task=0, dim=d, num_clients=N, client_sizes=np.ones(N, dtype=np.int64),
                      x0=torch.zeros(d, dtype=torch.float64), rng=np.random.default_rng(0))
    return registry.get("algorithm", name).factory(member("algorithm", name, **params), ctx)


def arrival(client, t, vectors, steps=3, meta=None):
    return Arrival(client=client, round=t, vectors=vectors, n_samples=1, steps=steps, train_loss=0.0,
                   meta=meta or {})


# --------------------------------------------------------------------------- T10 FedAU
def test_t10_fedau_weights_and_intervals():
    """One client active in spec rounds 0, 3, 5 (flemu 1, 4, 6): weights 1, 1, 2 and the
    recorded intervals [1, 3, 2]; an absence of K_cut = 50 rounds records 50 and restarts."""
    au = make("fedau", N=2, lr=0.1)
    d = torch.tensor([1.0, 0.0], dtype=torch.float64)
    used = []
    for t in range(1, 7):
        agg = au.aggregate(t, [arrival(0, t, [d])] if t in (1, 4, 6) else [])
        if t in (1, 4, 6):
            used.append(agg.client_cols["fedau_omega"][0])
            assert agg.weights[0] == pytest.approx(used[-1] / 2)          # omega / N
    assert used == [1.0, 1.0, 2.0]
    s, c = au.states.scalars("fedau_interval_sum"), au.states.scalars("fedau_interval_count")
    assert (s[0], c[0]) == (1 + 3 + 2, 3)
    assert au.states.scalars("fedau_absent")[0] == 0
    # the other client, never active: 6 absences counted, nothing recorded yet
    assert au.states.scalars("fedau_absent")[1] == 6 and c[1] == 0
    for t in range(7, 50):
        au.aggregate(t, [])
    assert au.states.scalars("fedau_absent")[1] == 49 and c[1] == 0
    au.aggregate(50, [])                                                    # client 1's 50th absence
    assert c[1] == 1 and s[1] == 50 and au.states.scalars("fedau_absent")[1] == 0
    au.aggregate(51, [])
    assert c[1] == 1 and au.states.scalars("fedau_absent")[1] == 1
    # client 0, absent since flemu round 6: 50 absences -> interval 50, counter back to 0
    for t in range(52, 57):
        au.aggregate(t, [])
    assert c[0] == 4 and s[0] == 6 + 50 and au.states.scalars("fedau_absent")[0] == 0
    agg = au.aggregate(57, [arrival(0, 57, [d])])
    assert agg.client_cols["fedau_omega"][0] == pytest.approx((1 + 3 + 2 + 50) / 4)
    assert c[0] == 5 and s[0] == 56 + 1                                     # then the interval a + 1 = 1


def test_trap_fedau_divides_by_n_not_the_active_count():
    au = make("fedau", N=4, lr=0.1, server_lr=1.0)
    d = torch.tensor([0.4, -0.8], dtype=torch.float64)
    au.aggregate(1, [arrival(2, 1, [d])])
    assert torch.allclose(au.x, d / 4, atol=0, rtol=1e-15)                # first weight 1, divisor N = 4


# --------------------------------------------------------------------------- T11 FedAWE
def test_t11_fedawe_echo_multipliers(run_in, tmp_path):
    seq = SEQ + [[2], [], [0, 1]]
    res = run_in(quad_scenario(algo_block("fedawe", 0.1), seq, tmp_path))
    c = pd.read_csv(res.run_dir / "clients.csv")
    act = c[c["weight"] > 0]
    for i in range(3):
        mine = act[act["client"] == i].sort_values("round")
        rounds = (mine["round"] - 1).tolist()                            # spec rounds
        mult = mine["fedawe_multiplier"].astype(int).tolist()
        assert rounds == [t for t, St in enumerate(seq) if i in St]
        assert mult[0] == rounds[0] + 1                                  # first time at t: t + 1
        assert mult[1:] == list(np.diff(rounds))                         # next at t': t' - t
        assert np.cumsum(mult).tolist() == [r + 1 for r in rounds]       # FedAWE Prop. 1: sum = R


# --------------------------------------------------------------------------- traps of 4.1
def test_trap_scaffold_control_variates_start_at_zero_and_c_moves_by_one_nth(tmp_path):
    """c^0 = c_i^0 = 0; c^{t+1} = c^t + (1/N) sum (c_i^+ - c_i), added once per client."""
    seen = []

    def check(algo, row):
        if row["round"] == 0:
            assert torch.count_nonzero(algo.c) == 0
            return
        ci = algo.states.table("scaffold_c")
        seen.append(int(row["round"]))
        assert torch.allclose(algo.c, ci.mean(0), rtol=0, atol=1e-14)     # c = (1/N) sum_i c_i
        if row["round"] == 1:
            assert torch.count_nonzero(ci[1:]) == 0                         # clients 1, 2 untouched

    run_world(quad_scenario(algo_block("scaffold", 0.1), SEQ, tmp_path), each=check)
    assert seen == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("schedule", ["constant", "inv_sqrt"])
def test_trap_scaffold_uses_the_steps_run_and_the_lr_used(schedule):
    """Option II's c_i^+ = c_i - c + (x^t - y_K) / (K_i eta_l^t) with K_i the steps the client
    actually ran (a straggler's 2 of 3) and eta_l^t the round's rate (not lr_0)."""
    sc = make("scaffold", lr=0.1, lr_schedule=schedule)
    grads, _ = ref.problem()
    sc.c = torch.tensor([0.3, -0.2], dtype=torch.float64)              # some earlier state
    sc.states.put("scaffold_c", 1, torch.tensor([0.1, 0.5], dtype=torch.float64))
    t = 5
    bc = sc.broadcast(t)
    spec = sc.local_spec(1, t, bc)
    eta = spec.rule.lr
    assert eta == pytest.approx(0.1 if schedule == "constant" else 0.1 / np.sqrt(4 / 10 + 1), rel=1e-15)
    x = bc.vectors[0].numpy()
    corr = spec.correction.numpy()
    z, gs = x.copy(), []
    for _ in range(2):                                                 # K_i = 2 of K = 3
        g = grads[1](z)
        gs.append(g)
        z = z - eta * (g + corr)
    res = TrainResult(params=torch.tensor(z), steps=2, loss_mean=0.0, grad_mean=torch.tensor(np.mean(gs, 0)))
    up = sc.upload(1, t, Done(res))
    c_i, c = np.array([0.1, 0.5]), np.array([0.3, -0.2])
    c_plus = c_i - c + (x - z) / (2 * eta)
    np.testing.assert_allclose(up.vectors[1].numpy(), c_plus - c_i, rtol=0, atol=1e-14)
    np.testing.assert_allclose(up.vectors[0].numpy(), z - x, rtol=0, atol=1e-15)
    sc.aggregate(t, [arrival(1, t, [v.value() if isinstance(v, Lazy) else v for v in up.vectors], steps=3,
                             meta={k: (v.value() if isinstance(v, Lazy) else v) for k, v in up.meta.items()})])
    np.testing.assert_allclose(sc.states.row("scaffold_c", 1).numpy(), c_plus, rtol=0, atol=1e-14)
    np.testing.assert_allclose(sc.c.numpy(), c + (c_plus - c_i) / 3, rtol=0, atol=1e-14)


def test_trap_mifa_stores_raw_updates_and_counts_unseen_clients_as_zero(tmp_path):
    """Lineage MIFA: u_i = y_K - x^t (not divided by eta_l^t, which decays here) and
    x^{t+1} = x^t + eta_g (1/N) sum over all N rows (unseen rows are zeros)."""
    rows = {}

    def check(algo, row):
        rows[int(row["round"])] = (algo.x.clone(), algo.states.table("mifa_u").clone() if row["round"] else None)

    run_world(quad_scenario(algo_block("mifa", 0.1, schedule="inv_sqrt"), SEQ, tmp_path), each=check)
    grads, _ = ref.problem()
    x0 = rows[0][0].numpy()
    z = x0.copy()
    for _ in range(3):
        z = z - 0.1 * grads[0](z)                                      # eta_l^0 = 0.1
    u1 = rows[1][1].numpy()
    np.testing.assert_allclose(u1[0], z - x0, rtol=0, atol=1e-15)      # raw update
    assert not u1[1:].any()
    np.testing.assert_allclose(rows[1][0].numpy(), x0 + (z - x0) / 3, rtol=0, atol=1e-15)
    # spec round 1 ({1}) at eta_l^1 = 0.1 / sqrt(1.1): client 1's row is its raw update
    x1 = rows[1][0].numpy()
    z = x1.copy()
    for _ in range(3):
        z = z - 0.1 / np.sqrt(1.1) * grads[1](z)
    np.testing.assert_allclose(rows[2][1].numpy()[1], z - x1, rtol=0, atol=1e-15)
    # round 3 of SEQ is empty: MIFA still steps with the stored mean
    x2, u2 = rows[2][0].numpy(), rows[2][1].numpy()
    np.testing.assert_allclose(rows[3][0].numpy(), x2 + u2.mean(0), rtol=0, atol=1e-15)


def test_trap_fedvarp_mean_before_replacing_and_no_step_when_empty(tmp_path):
    rows = {}

    def check(algo, row):
        rows[int(row["round"])] = (algo.x.clone(), algo.states.table("fedvarp_u").clone() if row["round"] else None)

    run_world(quad_scenario(algo_block("fedvarp", 0.1), SEQ, tmp_path), each=check)
    assert torch.equal(rows[3][0], rows[2][0])                         # S = {}: no step
    # spec round 3, S = {0, 2}: v = mean(u_old) + mean_{S}(Delta_i - u_i_old)
    u_old, u_new = rows[3][1].numpy(), rows[4][1].numpy()
    D = u_new[[0, 2]]
    v = u_old.mean(0) + (D - u_old[[0, 2]]).mean(0)
    np.testing.assert_allclose(rows[4][0].numpy(), rows[3][0].numpy() + v, rtol=0, atol=1e-15)
    assert not np.allclose(u_old.mean(0), u_new.mean(0))               # the two means differ here


def test_trap_fedawe_trains_from_its_own_model_and_absent_clients_never_download(tmp_path):
    """x_i = x^{tau_i + 1} (the model after its last active round), x_i^0 = x^0 before; the
    start of a client's local run is x_i, not the broadcast."""
    xs, world = run_world(quad_scenario(algo_block("fedawe", 0.1), SEQ, tmp_path))
    algo = world.tasks[0].algorithm
    xl, last = algo.states.table("fedawe_x").numpy(), algo.states.scalars("fedawe_last")
    assert last.tolist() == [5, 5, 5]
    np.testing.assert_allclose(xl, np.tile(xs[6], (3, 1)), rtol=0, atol=0)
    # after spec round 4 ({1}): client 0 holds x^4 (its round 3), client 2 too, client 1 x^5
    seq = SEQ[:5]
    _, w5 = run_world(quad_scenario(algo_block("fedawe", 0.1), seq, tmp_path))
    a5 = w5.tasks[0].algorithm
    np.testing.assert_allclose(a5.states.table("fedawe_x").numpy(), [xs[4], xs[5], xs[4]], rtol=0, atol=0)
    spec = a5.local_spec(0, 6, a5.broadcast(6))
    np.testing.assert_allclose(spec.start.numpy(), xs[4], rtol=0, atol=0)   # own model, not x^5
    assert not np.allclose(xs[4], xs[5])


def test_trap_fedawe_clips_the_mean_echo(tmp_path):
    """Clip 0.5 on the mean echoed innovation (2 vectors up). Spec round 0: client 0's echo
    has norm 0.271, unclipped; round 1: client 1 starts from its own x_1 = x^0 = 0 and echoes
    2 G_1 (norm 0.542), clipped to 0.5, so x^2 = -clip(echo) has norm 0.5. The reference (clip
    of the mean, not per client) holds on every round."""
    xs, _ = run_world(quad_scenario(algo_block("fedawe_clip", 0.1), SEQ, tmp_path))
    assert np.linalg.norm(xs[1] - xs[0]) == pytest.approx(0.271, rel=1e-14)
    assert np.linalg.norm(xs[2]) == pytest.approx(0.5, rel=1e-14)
    np.testing.assert_allclose(xs, reference("fedawe_clip", SEQ, 0.1, 3), rtol=0, atol=1e-10)
