"""The per-client state store (algorithms/state.py): stacked [N, d] tables created on first
use, pending lazy rows computed only when read, sizes reported in summary.json; and the
event trace (`output.events: true`)."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from emulator.algorithms.state import ClientStates
from emulator.compute.lazy import derived

from conftest import tiny
from test_lazy import job, make_exec


def test_tables_are_stacked_created_on_first_use_and_counted():
    st = ClientStates(5, 3, torch.device("cpu"), torch.float64)
    assert st.nbytes == 0 and not st.has("c")
    c = st.table("c")
    assert c.shape == (5, 3) and c.dtype == torch.float64 and (c == 0).all()
    x0 = torch.tensor([1.0, 2.0, 3.0])
    st.put("x_hat", 2, torch.tensor([7.0, 8.0, 9.0]), init=x0)
    assert torch.equal(st.row("x_hat", 0), x0.double()) and torch.equal(st.row("x_hat", 2), torch.tensor([7.0, 8, 9]).double())
    r = st.scalars("r", np.int64, init=-1)
    r[3] = 4
    assert st.scalars("r")[3] == 4 and st.scalars("r")[0] == -1
    assert st.nbytes == 2 * 5 * 3 * 8 + 5 * 8
    assert st.summary() == {"client_state_bytes": 280, "client_state_kinds": {"c": 120, "x_hat": 120, "r": 40}}
    st.put_rows("c", [1, 4], torch.ones(2, 3))
    assert st.table("c").sum() == 6


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
    assert s["client_state_bytes"] == 0 and s["client_state_kinds"] == {}


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
