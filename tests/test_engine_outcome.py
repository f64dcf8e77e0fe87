"""What both engines record of a participant, written once (sim/protocols/outcome.py): the
formulas, `record_outcomes` column by column, and every protocol's rows read back against
closed forms (rounds under both engines, intervals, async, multi_model, FedUMF's background
work). This file owns `record_outcomes`: each column it writes (comm_time, compute_time,
steps, min_compute, bytes_down, bytes_up, the messages, dropped and drop_reason) is pinned
here for each protocol.

The scenarios: logreg on digits, a message of 650 parameters = 2600 B = 20,800 bit; a link
of 50 ms and 8 Mbit/s moves it in D = 0.05 + 20800 / 8e6 = 0.0526 s; a step takes 0.1 s
(`fast`) or 0.5 s (`slow`); 4 local steps."""
import copy

import numpy as np
import pytest

from conftest import tiny
from emulator.errors import InvariantError
from emulator.scenario import schema as scenario
from emulator.sim.protocols.outcome import Outcomes, multicast_first, record_outcomes, record_unrun, steps_done
from emulator.sim.recorder import RoundLog
from emulator.sim.world import World

INF = np.inf
MSG = 2600                                   # bytes of one message (650 float32 parameters)
LINK = {"latency": 0.05, "up_mbps": 8, "down_mbps": 8}
D = 0.05 + MSG * 8 / 8e6                     # one transfer over LINK


def test_steps_done_floor_guard_and_zero_duration():
    # 3 of 10 steps after 0.3 s of 1 s (0.3 * 10 / 1 = 2.9999999999999996: the guard makes it 3)
    assert steps_done(10, 0.3, 1.0) == 3
    assert steps_done(10, 0.29, 1.0) == 2 and steps_done(10, 1.0, 1.0) == 10
    # a 0 s computation has done every step, whenever it is stopped (the process engine's
    # stop, the vector engine and FedUMF's `partial` agree; `partial` said 0 before)
    assert steps_done(7, 0.0, 0.0) == 7
    got = steps_done(np.array([10, 10, 7, 4]), np.array([0.3, 0.29, 0.0, 0.5]), np.array([1.0, 1.0, 0.0, 2.0]))
    assert got.dtype == np.int64 and got.tolist() == [3, 2, 7, 1]
    # scalars and arrays give the same numbers
    assert [steps_done(s, e, d) for s, e, d in zip([10, 10, 7, 4], [0.3, 0.29, 0.0, 0.5], [1.0, 1.0, 0.0, 2.0])] == \
        got.tolist()


def test_multicast_bytes_go_to_the_first_arrival():
    arrive = np.array([2.0, 1.0, 1.0, 0.5])
    assert multicast_first(arrive, np.array([True, True, True, False])) == 1      # tie at 1.0: first in order
    assert multicast_first(arrive, np.array([False, False, False, False])) is None


# -- record_outcomes, column by column --------------------------------------------------------
MESSAGES = ((100, 400), (50, 200))          # (parameters, bytes) down, up
IDS = [10, 11, 12, 13, 14, 15, 16, 17]
#                 A arrived, B late uploading, C late computing, D late downloading,
#                 E offline computing (at 2.5), F still running, G 0 s compute, late uploading,
#                 H arrived at the instant of the stop (it arrived: not dropped)
OUTCOMES = dict(
    ids=np.array(IDS), t0=0.0,
    steps=np.array([4, 6, 10, 5, 6, 5, 3, 2]),
    dur=np.array([2.0, 3.0, 6.0, 1.0, 3.0, 2.0, 0.0, 1.0]),
    floor=np.array([0.4, 0.5, 0.6, 0.2, 0.5, 0.4, 0.0, 0.5]),
    down=np.array([1.0, 1.0, 2.0, INF, 1.0, 1.0, 1.0, 1.0]),
    compute=np.array([3.0, 4.0, INF, INF, INF, INF, 1.0, 2.0]),
    up=np.array([4.0, INF, INF, INF, INF, INF, INF, 5.0]),
    at=np.array([5.0, 5.0, 5.0, 5.0, 2.5, 5.0, 5.0, 5.0]),
    stopped=np.array([False, True, True, True, True, False, True, True]),
    reason=["", "late", "late", "late", "offline", "", "late", "late"])
WANT = {   # client: (comm_time, compute_time, steps, min_compute, bytes_down, bytes_up, drop_reason)
    10: (2.0, 2.0, 4, 1.6, 400, 200, ""),              # 1 s down + 1 s up; all 4 steps
    11: (2.0, 3.0, 6, 3.0, 400, 0, "late"),            # 1 s down + 1 s of an upload that never lands
    12: (2.0, 3.0, 5, 3.0, 400, 0, "late"),            # 3 s of 6: floor(10 x 3 / 6) = 5 steps
    13: (5.0, 0.0, 0, 0.0, 0, 0, "late"),              # downloading until the close
    14: (1.0, 1.5, 3, 1.5, 400, 0, "offline"),         # 1.5 s of 3: 3 of 6 steps
    15: (1.0, 0.0, 0, 0.0, 400, 0, ""),                # still computing, not stopped: its download only
    16: (5.0, 0.0, 3, 0.0, 400, 0, "late"),            # 0 s: every step done; 4 s of its upload
    17: (4.0, 1.0, 2, 1.0, 400, 200, "")}              # 1 s down + 3 s up, ending at the stop


def columns(log, cid):
    i = log.at(cid)
    return (float(log.comm_time[i]), float(log.compute_time[i]), int(log.steps[i]), float(log.min_compute[i]),
            int(log.bytes_down[i]), int(log.bytes_up[i]), log.drop_reason.get(i, ""))


def test_record_outcomes_writes_every_column():
    log = RoundLog(1, 20, ids=IDS)
    arrived = record_outcomes(log, Outcomes(**OUTCOMES), MESSAGES)
    assert arrived.tolist() == [True] + [False] * 6 + [True]
    for cid, want in WANT.items():
        got = columns(log, cid)
        assert got[:4] == pytest.approx(want[:4], abs=1e-12) and got[4:] == want[4:], cid
        assert bool(log.dropped[log.at(cid)]) == bool(want[6]), cid
    # a message per transfer that ended: 7 downloads, 2 uploads (the late uploads count nothing)
    assert sorted(log.messages) == sorted([(100, 400, "down")] * 7 + [(50, 200, "up")] * 2)
    with pytest.raises(InvariantError, match="recorded twice"):     # a row is written once
        record_outcomes(log, Outcomes(**OUTCOMES), MESSAGES)


def test_record_outcomes_multicast_carrier_and_work_that_is_no_participation():
    log = RoundLog(1, 20, ids=IDS)
    carries = np.array([False, False, True, False, False, False, False, False])
    record_outcomes(log, Outcomes(**OUTCOMES, carries=carries), MESSAGES, drop=False)
    assert log.bytes_down.tolist() == [0, 0, 400, 0, 0, 0, 0, 0] and log.bytes_up.tolist() == [200] + [0] * 6 + [200]
    assert sorted(log.messages) == [(50, 200, "up"), (50, 200, "up"), (100, 400, "down")]
    assert not log.dropped.any() and not log.drop_reason          # drop=False: stopped, not dropped
    assert log.steps.tolist() == [WANT[c][2] for c in IDS]         # the rest as under drop=True


def test_record_unrun_writes_planned_work_once():
    log = RoundLog(1, 3)
    record_unrun(log, 2, 3, 0.9, 0.6, "min_iterations")
    assert columns(log, 2) == (0.0, 0.9, 3, 0.6, 0, 0, "min_iterations") and log.dropped[2]
    with pytest.raises(InvariantError, match="recorded twice"):
        record_unrun(log, 2, 3, 0.9, 0.6, "min_iterations")


# -- every protocol's rows, read back ------------------------------------------------------------
def groups(*specs):
    """Device groups (name, count, step_time, link overrides, availability)."""
    return [{"name": name, "count": n, "compute": {"model": "constant", "step_time": step},
             "network": dict(LINK, **link), **({"availability": avail} if avail else {})}
            for name, n, step, link, avail in specs]


def world_of(sc):
    w = World(scenario.load(copy.deepcopy(sc)))
    w.run()
    assert w.status == "complete", w.message
    return w


def check_rows(log, want: dict):
    for cid, row in want.items():
        got = columns(log, cid)
        assert got[:4] == pytest.approx(row[:4], abs=1e-12) and got[4:] == row[4:], (log.round, cid, got)
        assert bool(log.dropped[log.at(cid)]) == bool(row[6]), cid


def rounds_scenario(wait, *specs, **over):
    sc = tiny(**{"clients.count": sum(s[1] for s in specs), "run.rounds": 1, "protocol.select": {"model": "all"},
                 "protocol.local_steps": 4, "protocol.wait": wait, **over})
    sc["clients"]["groups"] = groups(*specs)
    return sc


@pytest.mark.parametrize("engine", ["process", "vector"])
def test_rounds_rows_under_both_engines(engine):
    """Deadline 1 s. Client 0 arrives at 2D + 0.4 s; client 1's upload (0.02 Mbit/s: 1.09 s)
    is in flight at the close: its steps and compute count, its upload's bytes do not;
    client 2 (0.5 s steps) is computing: floor(4 x (1 - D) / 2) = 1 step of 2 done."""
    sc = rounds_scenario({"mode": "deadline", "seconds": 1.0}, ("fast", 1, 0.1, {}, None),
                         ("upload", 1, 0.1, {"up_mbps": 0.02}, None), ("slow", 1, 0.5, {}, None),
                         **{"protocol.engine": engine})
    w = world_of(sc)
    assert w.protocol.engine == engine
    log = w.recorder.rounds[0]
    check_rows(log, {0: (2 * D, 0.4, 4, 0.4, MSG, MSG, ""),
                     1: (D + (1.0 - (D + 0.4)), 0.4, 4, 0.4, MSG, 0, "late"),
                     2: (D, 1.0 - D, 1, 0.5, MSG, 0, "late")})
    assert sorted(log.messages) == sorted([(650, MSG, "down")] * 3 + [(650, MSG, "up")])
    row = w.recorder.metrics[1]
    assert (row["bytes_down"], row["bytes_up"], row["dropped"], row["round_time"]) == (3 * MSG, MSG, 2, 1.0)


def test_rounds_rows_of_clients_going_offline(tmp_path):
    """The process engine, continuous-time availability: client 0 leaves at 0.03 s
    (downloading), client 1 at 0.3 s (computing: floor(4 x (0.3 - D) / 0.4) = 2 steps),
    client 2 at 0.47 s (uploading); client 3 arrives, and the round closes with it."""
    trace = tmp_path / "online.csv"
    trace.write_text("client,start,end\n0,0,0.03\n1,0,0.3\n2,0,0.47\n")
    avail = {"model": "trace", "path": str(trace), "repeat": False}
    w = world_of(rounds_scenario("all", ("leaving", 3, 0.1, {}, avail), ("staying", 1, 0.1, {}, None)))
    log = w.recorder.rounds[0]
    check_rows(log, {0: (0.03, 0.0, 0, 0.0, 0, 0, "offline"),
                     1: (D, 0.3 - D, 2, 0.2, MSG, 0, "offline"),
                     2: (D + (0.47 - (D + 0.4)), 0.4, 4, 0.4, MSG, 0, "offline"),
                     3: (2 * D, 0.4, 4, 0.4, MSG, MSG, "")})
    assert w.recorder.metrics[1]["round_time"] == pytest.approx(2 * D + 0.4, abs=1e-12)


def test_intervals_rows():
    """T-SFL, 1 s intervals, `iteration: batch`, `min_iterations: 2`. Client 0 fits
    tau = floor((1 - 2D) / 0.1) = 8 iterations; client 1 (0.3 s) fits 2: not allowed to
    upload, its planned work recorded unrun; client 2 (0.02 Mbit/s up) cannot even deliver."""
    sc = tiny(**{"clients.count": 3, "run.rounds": 1})
    sc["protocol"] = {"name": "intervals", "interval": 1.0, "iteration": "batch", "min_iterations": 2,
                      "select": {"model": "all"}}
    sc["clients"]["groups"] = groups(("fit", 1, 0.1, {}, None), ("few", 1, 0.3, {}, None),
                                     ("far", 1, 0.1, {"up_mbps": 0.02}, None))
    w = world_of(sc)
    log = w.recorder.rounds[0]
    check_rows(log, {0: (2 * D, 0.8, 8, 0.8, MSG, MSG, ""),
                     1: (0.0, 0.6, 2, 0.6, 0, 0, "min_iterations"),
                     2: (0.0, 0.0, 0, 0.0, 0, 0, "undeliverable")})
    assert log.extra["sgd_steps"].tolist() == [8, 2, 0]
    assert sorted(log.messages) == [(650, MSG, "down"), (650, MSG, "up")]


def test_async_job_rows_and_a_lost_job_under_the_next_merge(tmp_path):
    """FedAsync, 3 merges. Clients 0 and 1 arrive together at 2D + 0.4 s (merges 1 and 2, in
    order); client 1 leaves at 0.8 s while computing its second job (floor(4 x (0.8 - t) /
    0.4) steps since its download ended at t = 2D + 0.4 + D): lost, recorded under the next
    merge, 3 (two merges happened), the one client 0's second job makes at 2 x (2D + 0.4)."""
    trace = tmp_path / "online.csv"
    trace.write_text("client,start,end\n0,0,0.8\n")
    sc = tiny(**{"clients.count": 2, "run.rounds": 3, "algorithm": {"name": "fedasync", "lr": 0.1}})
    sc["protocol"] = {"name": "async", "local_steps": 4}
    sc["clients"]["groups"] = groups(("steady", 1, 0.1, {}, None),
                                     ("leaving", 1, 0.1, {}, {"model": "trace", "path": str(trace), "repeat": False}))
    w = world_of(sc)
    c = w.recorder.clients_frame()
    assert list(zip(c["round"], c["client"], c["job"])) == [(1, 0, 1), (2, 1, 1), (3, 1, 2), (3, 0, 2)]
    job = 2 * D + 0.4
    lost = 0.8 - (job + D)
    for log, want in zip(w.recorder.rounds, [(2 * D, 0.4, 4, 0.4, MSG, MSG, ""),
                                             (2 * D, 0.4, 4, 0.4, MSG, MSG, ""),
                                             (D, lost, int(4 * lost / 0.4), 0.1 * int(4 * lost / 0.4), MSG, 0,
                                              "offline"),
                                             (2 * D, 0.4, 4, 0.4, MSG, MSG, "")]):
        check_rows(log, {int(log.ids[0]): want})
    assert int(4 * lost / 0.4) == 2                          # not vacuous: stopped part-way
    m = w.recorder.metrics[1:]
    assert [r["virtual_time"] for r in m] == pytest.approx([job, job, 2 * job], abs=1e-12)
    # a merge's row counts its job's messages; a lost job is in no merge's row
    assert [(r["bytes_down"], r["bytes_up"]) for r in m] == [(MSG, MSG)] * 3


def test_multi_model_rows():
    """Two models (the same logreg), MFA-RR over 4 clients: 2 each. A 1 s deadline: the fast
    clients arrive at 2D + 0.4 s, the slow ones (0.5 s steps) are computing at the close:
    1 step of 4; each model's rows are its own log's."""
    sc = rounds_scenario({"mode": "deadline", "seconds": 1.0}, ("fast", 2, 0.1, {}, None), ("slow", 2, 0.5, {}, None))
    wl = sc.pop("workload")
    sc["workloads"] = [copy.deepcopy(wl), copy.deepcopy(wl)]
    sc["protocol"] = {"name": "multi_model", "assignment": "mfa_rr", "local_steps": 4,
                      "wait": {"mode": "deadline", "seconds": 1.0}}
    w = world_of(sc)
    want = {0: (2 * D, 0.4, 4, 0.4, MSG, MSG, ""), 1: (2 * D, 0.4, 4, 0.4, MSG, MSG, ""),
            2: (D, 1.0 - D, 1, 0.5, MSG, 0, "late"), 3: (D, 1.0 - D, 1, 0.5, MSG, 0, "late")}
    logs = [log for log in w.recorder.rounds if log.task >= 0]
    assert sorted(log.task for log in logs) == [0, 1]
    assert sorted(int(c) for log in logs for c in log.ids) == [0, 1, 2, 3]
    for log in logs:
        check_rows(log, {int(c): want[int(c)] for c in log.ids})
        row = next(r for r in w.recorder.metrics if r["round"] == 1 and r["model"] == log.task)
        assert (row["bytes_down"], row["bytes_up"]) == (int(log.bytes_down.sum()), int(log.bytes_up.sum()))


def test_fedumf_background_rows_cut_by_the_run_end():
    """FedUMF, 6 clients, 2 selected, a 0.3 s deadline, one round (10 Mbit/s links of 10 ms:
    d = 0.01 + 20800 / 1e7 s; 5 steps of 0.1 s). The participants are late (computing: 2
    steps); the 4 unselected clients' background work is cut by the run's end at 0.3 s: 2 of
    its 5 steps, its download's bytes, no upload, never dropped (`background_stop`)."""
    sc = tiny(**{"run.rounds": 1, "protocol.select": {"model": "uniform", "k": 2},
                 "protocol.wait": {"mode": "deadline", "seconds": 0.3}})
    sc["algorithm"] = {"name": "fedumf", "lr": 0.1, "alpha": 1.0}
    w = world_of(sc)
    log = w.recorder.rounds[0]
    d = 0.01 + MSG * 8 / 1e7
    sel = set(np.flatnonzero(log.selected).tolist())
    assert len(sel) == 2
    check_rows(log, {c: (d, 0.3 - d, 2, 0.2, MSG, 0, "late" if c in sel else "") for c in range(6)})
    assert (log.extra["background_stop"] == np.array(["" if c in sel else "run_end" for c in range(6)])).all()
    assert w.recorder.metrics[1]["bytes_down"] == 6 * MSG and w.recorder.metrics[1]["bytes_up"] == 0


def test_fedumf_a_late_background_download_is_recorded_once_and_counted_in_the_next_row():
    """The late download of tests/test_fedumf_background_bytes.py (client 3, 1.5 s latency,
    unselected in round 1 of 1.02 s, `unfinished: wait`): its round-1 row says the whole
    download (1.5 s + 64 ns), its step, its bytes down and none up, recorded once when the
    work ended; round 1's metrics row counts the 3 downloads that had ended, round 2's its own
    4 and this one."""
    from test_fedumf_background_bytes import scenario as umf_scenario
    w = world_of(umf_scenario("unicast", 1.5))
    log = w.recorder.rounds[0]
    msg, t = 8, 0.01 + 6.4e-8
    check_rows(log, {0: (2 * t, 1.0, 1, 1.0, msg, msg, ""), 1: (2 * t, 1.0, 1, 1.0, msg, msg, ""),
                     2: (t, 1.0, 1, 1.0, msg, 0, ""), 3: (1.5 + 6.4e-8, 1.0, 1, 1.0, msg, 0, "")})
    assert log.late_out.tolist() == [0, msg] and w.recorder.rounds[1].late_in.tolist() == [0, msg]
    assert [r["bytes_down"] for r in w.recorder.metrics[1:]] == [3 * msg, 5 * msg, 4 * msg]
