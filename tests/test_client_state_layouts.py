"""Whole runs on the row store (rows stored on first write) and on the dense [N, d] layout
(the private `ClientStates._dense_layout`): every algorithm with per-client vector state gives
the same bits on the quadratic (float64) and on a small fleet (float32): metrics.csv,
clients.csv and model.npy; summary.json reports the same dense-equivalent bytes, and the row
store reports as rows written exactly the clients merged in clients.csv (docs/client-state.md)."""
import numpy as np
import pandas as pd
import pytest

from emulator.algorithms.state import ClientStates

from conftest import quadratic_scenario, tiny

QUAD = {"fedsum_cr": {}, "scaffold": {}, "mifa": {}, "fedvarp": {}, "fedawe": {}, "fedumf": {}}
FLEET = ("mifa", "fedsum_cr")
MERGED_ROWS = {"fedsum_cr": ("fedsum_y", "fedsum_xhat"), "scaffold": ("scaffold_c",), "mifa": ("mifa_u",),
               "fedvarp": ("fedvarp_u",), "fedawe": ("fedawe_x",)}


def _both(run_in, monkeypatch, sc):
    rows = run_in(sc, "rows")
    monkeypatch.setattr(ClientStates, "_dense_layout", True)
    dense = run_in(sc, "dense")
    monkeypatch.setattr(ClientStates, "_dense_layout", False)
    return rows, dense


def _same_run(a, b):
    wall = [c for c in a.metrics.columns if "wall" in c]
    pd.testing.assert_frame_equal(a.metrics.drop(columns=wall), b.metrics.drop(columns=wall), check_exact=True)
    assert (a.run_dir / "clients.csv").read_bytes() == (b.run_dir / "clients.csv").read_bytes()
    assert np.load(a.run_dir / "model.npy").tobytes() == np.load(b.run_dir / "model.npy").tobytes()
    assert a.summary["client_state_dense_bytes"] == b.summary["client_state_dense_bytes"] > 0
    return pd.read_csv(a.run_dir / "clients.csv")


def _check_rows(res, dense, algo, clients):
    n = len(set(clients["client"]))
    merged = clients[clients["weight"] > 0]["client"].nunique()
    for kind in MERGED_ROWS.get(algo, ()):
        assert res.summary["client_state_rows"][kind] == merged
        assert dense.summary["client_state_rows"][kind] == n


@pytest.mark.parametrize("algo", list(QUAD))
def test_quadratic_rows_and_dense_layout_bit_for_bit(run_in, monkeypatch, algo):
    sc = quadratic_scenario(n=8, rounds=8, k=3, algo=algo, lr=0.05, **QUAD[algo])
    rows, dense = _both(run_in, monkeypatch, sc)
    clients = _same_run(rows, dense)
    _check_rows(rows, dense, algo, clients)
    assert rows.metrics["gap"].iloc[-1] < rows.metrics["gap"].iloc[0]          # the runs did move
    if algo in MERGED_ROWS:    # a block holds at most N rows: at N = 8 the row store holds what the dense one holds
        assert rows.summary["client_state_bytes"] == dense.summary["client_state_bytes"]
    else:                      # FedUMF: no kept update was ever read, so no row was stored
        assert rows.summary["client_state_rows"] == {"g": 0} and dense.summary["client_state_rows"] == {"g": 8}
        assert rows.summary["client_state_bytes"] == dense.summary["client_state_bytes"] - 8 * 33 * 8


@pytest.mark.parametrize("algo", FLEET)
def test_fleet_rows_and_dense_layout_bit_for_bit(run_in, monkeypatch, algo):
    sc = tiny(**{"algorithm.name": algo, "clients.count": 10, "protocol.select.k": 4, "run.rounds": 3})
    rows, dense = _both(run_in, monkeypatch, sc)
    clients = _same_run(rows, dense)
    _check_rows(rows, dense, algo, clients)
