"""The per-client state store (algorithms/state.py, docs/client-state.md): rows stored on first
write (memory scales with the clients written, reading allocates nothing), exact kept sums,
the row layout reading bit for bit what the dense layout reads, pending lazy rows computed
only when read, sizes reported in summary.json; and the event trace (`output.events: true`).
Whole runs on both layouts: tests/test_client_state_layouts.py."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from emulator.algorithms.state import ClientStates
from emulator.compute.lazy import derived

from conftest import tiny
from test_lazy import job, make_exec


def test_rows_are_stored_on_first_write_and_reading_allocates_nothing():
    st = ClientStates(5, 3, torch.device("cpu"), torch.float64)
    assert st.nbytes == 0 and not st.has("c")
    c = st.table("c")                                        # a copy for inspection: allocates no rows
    assert c.shape == (5, 3) and c.dtype == torch.float64 and (c == 0).all()
    x0 = torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(st.row("x_hat", 0, init=x0), x0.double()) and torch.equal(st.row("c", 4), torch.zeros(3).double())
    st.drop("c", 1)                                          # resetting a zero row that was never written
    assert st.nbytes == 0 and st.summary()["client_state_rows"] == {"c": 0, "x_hat": 0}
    st.put("x_hat", 2, torch.tensor([7.0, 8.0, 9.0]))
    assert torch.equal(st.row("x_hat", 0), x0.double()) and torch.equal(st.row("x_hat", 2), torch.tensor([7.0, 8, 9]).double())
    r = st.scalars("r", np.int64, init=-1)
    r[3] = 4
    assert st.scalars("r")[3] == 4 and st.scalars("r")[0] == -1
    # one block of at most N = 5 rows (5 x 3 x 8 B) for x_hat, none for c; r: 5 x 8 B
    assert st.nbytes == 5 * 3 * 8 + 5 * 8
    assert st.summary() == {"client_state_bytes": 160, "client_state_dense_bytes": 2 * 120 + 40,
                            "client_state_kinds": {"c": 0, "x_hat": 120, "r": 40},
                            "client_state_rows": {"c": 0, "x_hat": 1}}
    st.put_rows("c", [1, 4], torch.ones(2, 3))
    assert st.table("c").sum() == 6 and st.summary()["client_state_rows"]["c"] == 2


def test_memory_scales_with_the_clients_written_not_with_n():
    """10^6 clients, d = 1000 float32 (4 kB a row, 262 rows a 1 MiB block): 500 clients
    written in two kinds hold 2 x 2 blocks, within 1.05x of 500 x d x 4 B x 2 kinds; the
    dense equivalent is 8 GB; reading every 1000th row allocates nothing."""
    n, d = 10 ** 6, 1000
    st = ClientStates(n, d, torch.device("cpu"), torch.float32)
    for c in range(0, n, 1000):
        st.row("y", c)
    assert st.nbytes == 0 and st.peak_bytes == 0
    ids = list(range(7, n, n // 500))[:500]
    for kind in ("y", "xhat"):
        for start in range(0, 500, 100):                     # 100 clients a round
            st.put_rows(kind, ids[start:start + 100], torch.full((100, d), 1.5))
    block = 262 * d * 4
    assert st.nbytes == st.peak_bytes == 2 * 2 * block
    assert st.nbytes <= 1.05 * 500 * d * 4 * 2
    assert st.summary()["client_state_dense_bytes"] == 2 * n * d * 4
    assert st.summary()["client_state_rows"] == {"y": 500, "xhat": 500}
    assert float(st.row("y", ids[499])[0]) == 1.5 and float(st.row("y", ids[499] + 1)[0]) == 0.0


def _exact_mean(rows, n):
    """The exact sum of float rows (rational arithmetic), rounded once to float64, over n."""
    from fractions import Fraction
    return torch.tensor([float(sum(Fraction(float(v)) for v in col)) for col in rows.T.tolist()],
                        dtype=torch.float64) / n


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kept_sum_is_exact_whatever_the_writes(dtype):
    """mean(kind) is (1/N) sum of the N rows as they are now, exactly (rounded once): the same
    bits after overwrites, drops, pending rows and any order of writes as a store written once
    with the final rows, and as the rational sum; values spread over 60 binades."""
    n, d = 40, 6
    g = torch.Generator().manual_seed(1)
    final = (torch.randn(n, d, generator=g, dtype=torch.float64)
             * torch.exp2(torch.randint(-30, 30, (n, d), generator=g).double())).to(dtype)
    final[final.abs() < final.abs().median()] = 0.0          # some rows partly zero; rows 30.. never written
    final[30:] = 0.0
    once = ClientStates(n, d, torch.device("cpu"), dtype)
    once.declare("u", keep_sum=True)
    once.put_rows("u", list(range(30)), final[:30])
    busy = ClientStates(n, d, torch.device("cpu"), dtype)
    busy.declare("u", keep_sum=True)
    for c in torch.randperm(30, generator=g).tolist():       # junk first, in another order
        busy.put("u", c, final[c] * 3 + 1e6)
    busy.put_rows("u", list(range(0, 30, 2)), -final[0:30:2])
    busy.drop("u", 5)
    busy.drop("u", 6, reset=torch.full((d,), 7.0))
    busy.put("u", 35, torch.ones(d))
    busy.drop("u", 35)                                       # written, then back to zeros
    busy.put_rows("u", list(range(30)), final[:30])
    ex, net = make_exec()
    w0 = net.initial_vector()
    lazy = derived(lambda r: r.params[:d].to(dtype) * 0 + final[3], job(ex, net, 0, w0))
    busy.put("u", 3, lazy)                                   # pending: counted when mean() reads it
    assert busy.is_pending("u", 3)
    m = busy.mean("u")
    assert lazy.done and not busy.is_pending("u", 3)
    assert m.dtype == dtype and torch.equal(m, once.mean("u"))
    assert torch.equal(m, _exact_mean(final, n).to(dtype))
    assert torch.equal(busy.table("u"), final)


def test_kept_sum_of_non_finite_rows_follows_ieee_and_recovers_when_they_are_overwritten():
    st = ClientStates(4, 3, torch.device("cpu"), torch.float32)
    st.declare("u", keep_sum=True)
    st.put_rows("u", [0, 1], torch.tensor([[1.0, float("inf"), float("nan")], [2.0, float("-inf"), 1.0]]))
    m = st.mean("u")
    assert m[0] == 0.75 and torch.isnan(m[1]) and torch.isnan(m[2])        # inf + -inf, nan
    st.put("u", 1, torch.tensor([2.0, 4.0, 1.0]))
    m = st.mean("u")
    assert m[0] == 0.75 and m[1] == float("inf") and torch.isnan(m[2])
    st.put("u", 0, torch.tensor([1.0, 3.0, 5.0]))
    assert torch.equal(st.mean("u"), torch.tensor([0.75, 1.75, 1.5]))


def test_mean_needs_a_kept_sum():
    st = ClientStates(3, 2, torch.device("cpu"), torch.float32)
    st.put("c", 0, torch.ones(2))
    with pytest.raises(ValueError, match="keep_sum"):
        st.mean("c")


def _random_ops(st, seed):
    """One scripted sequence of every write and read the algorithms use; returns what was read."""
    g = torch.Generator().manual_seed(seed)
    x0 = torch.arange(4.0)
    st.declare("u", keep_sum=True)
    seen = []
    for step in range(30):
        ids = torch.randperm(50, generator=g)[:5].tolist()
        vals = torch.randn(5, 4, generator=g)
        st.put_rows("u", ids, vals)
        st.put_rows("xhat", ids[:2], vals[:2] * 2, init=x0)
        st.put("y", ids[0], vals[0])
        if step % 7 == 3:
            st.drop("y", ids[1])
        seen += [st.mean("u").clone(), st.rows("u", ids[::-1]).clone(), st.row("xhat", step, init=x0).clone(),
                 st.row("y", (step * 7) % 50).clone()]
    return seen + [st.table(k).clone() for k in ("u", "xhat", "y")]


def test_row_layout_reads_what_the_dense_layout_reads(monkeypatch):
    rows = _random_ops(ClientStates(50, 4, torch.device("cpu"), torch.float32), 3)
    monkeypatch.setattr(ClientStates, "_dense_layout", True)
    dense_store = ClientStates(50, 4, torch.device("cpu"), torch.float32)
    dense = _random_ops(dense_store, 3)
    assert dense_store.nbytes > 3 * 50 * 4 * 4               # really the dense layout
    assert len(rows) == len(dense) and all(torch.equal(a, b) for a, b in zip(rows, dense))


def test_pending_rows_are_computed_only_when_read_and_dropped_when_overwritten():
    ex, net = make_exec()
    w0 = net.initial_vector()
    st = ClientStates(4, net.dim, torch.device("cpu"), torch.float32)
    a = job(ex, net, 0, w0)
    b = job(ex, net, 1, w0)
    st.put("g", 0, derived(lambda r: r.params - w0, a))      # a FedUMF-style kept update
    st.put("g", 1, derived(lambda r: r.params - w0, b))
    assert ex.stats.jobs_computed == 0 and st.is_pending("g", 0)
    lazy = st.get("g", 0)
    assert ex.stats.jobs_computed == 0 and not lazy.done       # handing it on computes nothing
    st.put("g", 1, torch.zeros(net.dim))                     # overwritten: b is never computed
    got = st.row("g", 0)
    assert ex.stats.jobs_computed == 1 and not b.done
    assert torch.allclose(got, a.value().params - w0)
    assert not st.is_pending("g", 0) and torch.equal(st.table("g")[1], torch.zeros(net.dim))


def test_summary_reports_client_state_bytes(run_in):
    s = run_in(tiny()).summary
    assert s["client_state_bytes"] == s["client_state_dense_bytes"] == 0
    assert s["client_state_kinds"] == s["client_state_rows"] == {}


def test_event_trace_is_an_option_and_its_times_match_clients_csv(run_in):
    off = run_in(tiny(), "off")
    assert not (off.run_dir / "events.csv").exists()
    res = run_in(tiny(**{"output.events": True}), "on")
    ev = pd.read_csv(res.run_dir / "events.csv")
    c = pd.read_csv(res.run_dir / "clients.csv")
    m = pd.read_csv(res.run_dir / "metrics.csv").set_index("round")
    sel = c[c["selected"]]
    assert len(ev) == 5 * len(sel)                     # selected, downloading, computing, uploading, done
    for r in sel.itertuples():
        e = ev[(ev["round"] == r.round) & (ev["client"] == r.client)].set_index("state")["time"]
        start = m.loc[r.round - 1, "virtual_time"]
        assert e["selected"] == e["downloading"] == pytest.approx(start)
        down = e["computing"] - e["downloading"]
        assert e["uploading"] - e["computing"] == pytest.approx(r.compute_time)
        assert down + (e["done"] - e["uploading"]) == pytest.approx(r.comm_time)
        assert e["done"] <= m.loc[r.round, "virtual_time"] + 1e-12
    import yaml
    assert yaml.safe_load((res.run_dir / "config.yaml").read_text())["output"]["events"] is True
