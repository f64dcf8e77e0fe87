"""FedUMF's background downloads that outlast their round (docs/engine.md, "Bytes"): in
clients.csv a download's bytes belong to the row of the round whose broadcast it carries
(recorded once, when the work ends); in metrics.csv every byte counts once, in the first row
of its model written when it has ended: its round's row, or, for a download that ends after
that row was written, the next one (rows are final when written); a multicast broadcast is
counted once per round whatever round is in progress when a late download ends.

Clients 0-2 have fast links (10 ms), client 3 a slow one; every step takes 1 s, K = 1; client
3 is unselected in round 1 (it downloads theta_1 in the background) and selected in round 2
with `unfinished: wait`, so its round-1 download ends after round 1 closed (at 1.020 s).
FedAvg under the vector engine runs the same rounds: it has no background work, and its
participants' rows and (under multicast) its bytes per round are what FedUMF's must be."""
import numpy as np
import pandas as pd
import pytest

from conftest import quadratic_scenario
from emulator.api import Callback

MSG = 2 * 4          # a message: d = 2 parameters of 4 bytes


def scenario(broadcast: str, slow_latency: float, algo: str = "fedumf", engine: str = "process") -> dict:
    sc = quadratic_scenario(n=4, rounds=3, steps=1, lr=0.1, algo=algo)
    sc["workload"]["dataset"] = {"name": "client_quadratic", "a": [[1, 2], [2, 1], [1, 1], [0.5, 1]],
                                 "c": [[1, 0], [0, 1], [2, 3], [1, 1]]}
    sc["protocol"].update(select={"model": "sequence", "sets": [[0, 1], [3], [0, 3]]},
                          broadcast=broadcast, engine=engine)
    if algo == "fedumf":
        sc["algorithm"].update(unfinished="wait", alpha=1.0)
    g = sc["clients"]["groups"][0]
    del g["fraction"]
    link = {"latency": 0.01, "up_mbps": 1000, "down_mbps": 1000}
    sc["clients"]["groups"] = [dict(g, name="fast", count=3, network=link),
                               dict(g, name="slow", count=1, network=dict(link, latency=slow_latency))]
    return sc


class Seen(Callback):
    """Copies of the metrics rows as the callbacks see them, when each is written."""

    def __init__(self):
        self.rows = []

    def after_aggregation(self, run, row):
        self.rows.append(dict(row))


def outputs(run, late=None):
    """metrics.csv and clients.csv; `late`: {round: (later round, bytes)} downloads of a
    round's broadcast that ended after its metrics row, counted in the later round's row."""
    m = pd.read_csv(run.run_dir / "metrics.csv")
    m = m[m["round"] >= 1].set_index("round")
    c = pd.read_csv(run.run_dir / "clients.csv").set_index(["round", "client"])
    assert run.summary["status"] == "complete"
    # metrics.csv's bytes of each round are its clients.csv rows', less the late downloads
    # moved to a later row (the bytes invariant, read back); every byte counted once
    per_round = c.groupby("round")[["bytes_up", "bytes_down"]].sum()
    for r, (later, nb) in (late or {}).items():
        per_round.loc[r, "bytes_down"] -= nb
        per_round.loc[later, "bytes_down"] += nb
    pd.testing.assert_frame_equal(per_round, m[["bytes_up", "bytes_down"]], check_names=False)
    assert run.summary["bytes_down"] == c["bytes_down"].sum()
    return m, c


def same_participants(umf, avg):
    """The selected clients' rows agree between FedUMF (process) and FedAvg (vector)."""
    sel_u, sel_a = umf[umf["selected"]], avg[avg["selected"]]
    assert sel_u.index.equals(sel_a.index)
    for col in ("steps", "bytes_up"):
        assert sel_u[col].tolist() == sel_a[col].tolist()
    for col in ("comm_time", "compute_time"):
        np.testing.assert_allclose(sel_u[col], sel_a[col], rtol=1e-12)


def test_a_background_download_ending_after_its_round_closed_counts_in_the_next_row(run_in):
    """Unicast, client 3's latency 1.5 s: its round-1 download ends at 1.5 s, in round 2
    (which waits for that job: 1.5 + 1 s). clients.csv: round 1 has its 4 downloads (clients
    0, 1 selected; 2, 3 in the background) and 2 uploads. metrics.csv: round 1's row, written
    at 1.02 s, counts the 3 that had ended; round 2's counts its own 4 and the late one. (Before,
    round 1's row was changed after it was written, and callbacks saw 3 where metrics.csv said 4.)"""
    seen = Seen()
    umf = run_in(scenario("unicast", 1.5), "umf", callbacks=[seen])
    m, c = outputs(umf, late={1: (2, MSG)})
    # a row is final when written: the callbacks saw what metrics.csv holds
    assert [(r["round"], r["bytes_up"], r["bytes_down"]) for r in seen.rows] == \
        list(zip(m.index, m["bytes_up"], m["bytes_down"]))
    assert c.groupby("round")["bytes_down"].sum().tolist() == [4 * MSG, 4 * MSG, 4 * MSG]   # every online client
    assert m["bytes_down"].tolist() == [3 * MSG, 5 * MSG, 4 * MSG]
    assert m["bytes_up"].tolist() == [2 * MSG, 1 * MSG, 2 * MSG]
    r1 = c.loc[(1, 3)]
    assert not r1["selected"] and r1["trained"] and r1["bytes_down"] == MSG and r1["bytes_up"] == 0
    assert r1["comm_time"] == pytest.approx(1.5 + MSG * 8 / 1e9, rel=1e-12)   # its whole download
    assert r1["steps"] == 1 and r1["compute_time"] == 1.0
    # round 2 starts when round 1 closes (2 x (0.01 + 64 ns) + 1 s); client 3 starts its own
    # round after its round-1 job (1.5 s download, 1 s step): then 1.5 + 1 + 1.5 s
    t1 = m.loc[1, "virtual_time"]
    assert t1 == pytest.approx(1.02 + 2 * 6.4e-8, rel=1e-12)
    assert m.loc[2, "virtual_time"] == pytest.approx(2.5 + 6.4e-8 + 4.0 + 2 * 6.4e-8, rel=1e-12)
    # FedAvg under the vector engine: the same participants, bytes up; downloads = FedUMF's
    # less the background ones (rounds 1, 2, 3: 2, 3, 2 unselected online clients)
    avg = run_in(scenario("unicast", 1.5, "fedavg", "vector"), "avg")
    ma, ca = outputs(avg)
    assert avg.summary["engine"] == "vector"
    assert ma["bytes_up"].tolist() == m["bytes_up"].tolist()
    bg = c[~c["selected"]].groupby("round")["bytes_down"].sum()
    assert bg.tolist() == [2 * MSG, 3 * MSG, 2 * MSG]
    assert (ca.groupby("round")["bytes_down"].sum() + bg).tolist() == [4 * MSG] * 3
    same_participants(c, ca)


def test_a_late_multicast_download_takes_nothing_from_the_next_round(run_in):
    """Multicast, client 3's latency 1.025 s: its round-1 download ends at 1.025 s, after
    round 1 closed and before round 2's first download (1.030 s). Round 1's broadcast was
    already counted (client 0), so it carries nothing; round 2 counts its own broadcast once
    (client 0, the first of round 2's to arrive). Before, the late download took round 2's
    "counted" flag: round 1 counted two messages, round 2 none."""
    umf = run_in(scenario("multicast", 1.025), "umf")
    m, c = outputs(umf)
    assert m["bytes_down"].tolist() == [MSG, MSG, MSG]
    assert m["bytes_up"].tolist() == [2 * MSG, 1 * MSG, 2 * MSG]
    down = c["bytes_down"]
    assert down[down > 0].index.tolist() == [(1, 0), (2, 0), (3, 0)]
    assert c.loc[(1, 3), "comm_time"] == pytest.approx(1.025 + MSG * 8 / 1e9, rel=1e-12)
    assert c.loc[(1, 3), "trained"]
    # the same bytes per round as FedAvg under the vector engine (one message a round)
    avg = run_in(scenario("multicast", 1.025, "fedavg", "vector"), "avg")
    ma, ca = outputs(avg)
    assert avg.summary["engine"] == "vector"
    assert ma[["bytes_up", "bytes_down"]].equals(m[["bytes_up", "bytes_down"]])
    same_participants(c.drop(columns="bytes_down"), ca.drop(columns="bytes_down"))


def test_a_download_recorded_when_its_job_is_abandoned_rounds_later_counts_when_it_ends(run_in, tmp_path):
    """Per-round availability: client 3 (latency 1.5 s) is offline in round 2, so its round-1
    job goes on (download to 1.5 s, in round 2); it is selected in round 3 (from 2.04 s) with
    `unfinished: skip`, which abandons the job still computing (it fuses nothing: it was
    offline in round 2): the stop records round 1's row, download and all, once. metrics.csv
    counts the download in round 2's row (written at 2.04 s, after it ended), not round 3's
    (written after the row was recorded)."""
    sc = scenario("unicast", 1.5)
    sc["algorithm"]["unfinished"] = "skip"
    sc["protocol"]["select"]["sets"] = [[0, 1], [0, 1], [0, 3]]
    trace = tmp_path / "avail.csv"
    trace.write_text("round,client,available\n" + "".join(
        f"{r},0,{0 if r == 2 else 1}\n" for r in range(1, 4)))
    sc["clients"]["groups"][1]["availability"] = {"model": "round_trace", "path": str(trace), "repeat": False}
    m, c = outputs(run_in(sc), late={1: (2, MSG)})
    assert c.groupby("round")["bytes_down"].sum().tolist() == [4 * MSG, 3 * MSG, 4 * MSG]   # round 2: 3 offline
    assert m["bytes_down"].tolist() == [3 * MSG, 4 * MSG, 4 * MSG]
    r1 = c.loc[(1, 3)]
    assert r1["bytes_down"] == MSG and r1["background_stop"] == "unfinished" and r1["steps"] == 0
    t2 = m.loc[2, "virtual_time"]                                       # round 3 starts: the stop
    assert r1["compute_time"] == pytest.approx(t2 - (1.5 + 6.4e-8), rel=1e-12)
    assert c.loc[(3, 3), "fuse_skipped"] == "offline" and not c.loc[(2, 3), "available"]
