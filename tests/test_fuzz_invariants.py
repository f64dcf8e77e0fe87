"""The post-run invariants complete enough for the issue's three historical bugs and the checks
the scenario generator needs (issue 16): each corruption below is what one of those bugs (or a
plausible cousin) leaves in the recorder, and emulator/runs/invariants.py must name it."""

import numpy as np
import pytest

from emulator.runs import invariants, runner
from emulator.scenario import schema as scenario
from emulator.errors import InvariantError
from emulator.sim.recorder import RoundLog
from emulator.sim.world import World

from conftest import tiny


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # conftest.py


def _world(sc):
    w = World(scenario.load(sc))
    w.run()
    m = w.recorder.metrics_frame()
    runner.add_delay_metrics(w, m)
    return w, m


def _check(w, m):
    return invariants.check(w, m, w.recorder.clients_frame())


def _async():
    return tiny(**{"clients.count": 3, "protocol": {"name": "async", "local_steps": 2},
                   "algorithm": {"name": "fedasync", "lr": 0.1}, "run.rounds": 6})


def _multi():
    sc = tiny(**{"clients.count": 4, "run.rounds": 3})
    sc["workloads"] = [sc.pop("workload")] * 2
    sc["protocol"] = {"name": "multi_model", "local_steps": 2, "assignment": "mfa_rand"}
    return sc


def test_async_rows_are_jobs_merged_once():
    """Historical bug 2: async wrote one N-wide block of rows per merge (every client, merged or
    not, under each merge). Such a block, put back in place of a merge's log, is caught; so is
    a merge that records its client twice, and a job that was neither merged nor lost."""
    w, m = _world(_async())
    _check(w, m)
    i = w.recorder.rounds.index(w.recorder.aggregations()[1])
    merged = w.recorder.rounds[i]
    dense = RoundLog(merged.round, w.num_clients, merged.task, aggregation=True)      # the old block
    c = int(merged.clients()[0])
    dense.selected[c] = dense.available[c] = True
    dense.weight[c] = merged.weight[0]
    dense.bytes_up[c], dense.bytes_down[c] = merged.bytes_up[0], merged.bytes_down[0]
    dense.messages = merged.messages
    dense.round_time = merged.round_time
    w.recorder.rounds[i] = dense
    with pytest.raises(InvariantError, match="rows without a job key"):
        _check(w, m)

    w, m = _world(_async())
    merged = w.recorder.aggregations()[1]
    twice = RoundLog(merged.round, w.num_clients, merged.task, ids=[*merged.clients(), *merged.clients()],
                     aggregation=True)
    twice.set_extra("job", int(merged.clients()[0]), 1, dtype=np.int64, default=0)
    w.recorder.rounds[w.recorder.rounds.index(merged)] = twice
    with pytest.raises(InvariantError, match=r"two rows for one \(round, client\) among merged jobs"):
        _check(w, m)

    w, m = _world(_async())
    stray = RoundLog(2, w.num_clients, 0, ids=[0])
    stray.set_extra("job", 0, 99, dtype=np.int64, default=0)
    w.recorder.rounds.append(stray)
    with pytest.raises(InvariantError, match="neither merged nor lost"):
        _check(w, m)


@pytest.mark.parametrize("make", [tiny, _multi], ids=["rounds", "multi_model"])
def test_a_client_with_two_rows_in_one_round_across_logs(make):
    """One row per (round, client) and model, across logs: a second log of the same round
    (a protocol writing a round twice, or a client in two models' groups) is caught."""
    w, m = _world(make())
    _check(w, m)
    first = next(log for log in w.recorder.rounds if log.n)
    w.recorder.rounds.append(RoundLog(first.round, w.num_clients, first.task, ids=first.clients()[:1]))
    with pytest.raises(InvariantError, match="two rows for one"):
        _check(w, m)


def test_a_model_never_trained_is_caught():
    """Historical bug 1: a second model never trained. A multi-model run whose model 1 was
    given clients but has no aggregation."""
    w, m = _world(_multi())
    _check(w, m)
    for log in w.recorder.rounds:
        if log.task == 1:
            log.aggregation = False
    m = m[m["model"] != 1]
    with pytest.raises(InvariantError, match="model 1 .* was never aggregated"):
        _check(w, m)


def test_delay_metrics_counting_lost_work_are_caught():
    """Historical bug 3: delay metrics inflated by async jobs lost to dropouts, counted as
    aggregations: add_delay_metrics over every log gives a tau the clients rows do not."""
    sc = _async()
    sc["clients"]["groups"][0]["availability"] = {"model": "markov_time", "mean_on": 0.3, "mean_off": 0.3}
    sc["run"]["rounds"] = 12
    w = World(scenario.load(sc))
    w.run()
    lost = [log for log in w.recorder.rounds if not log.aggregation]
    assert lost                                          # the run did lose work
    m = w.recorder.metrics_frame()
    real = w.recorder.aggregations
    w.recorder.aggregations = lambda task=None: [log for log in w.recorder.rounds
                                                 if task is None or log.task == task]   # the old bug
    runner.add_delay_metrics(w, m)
    w.recorder.aggregations = real
    with pytest.raises(InvariantError, match="differs from the delay clients.csv gives"):
        _check(w, m)


def test_metrics_bytes_down_must_add_up():
    w, m = _world(tiny())
    _check(w, m)
    m.loc[m["round"] == 2, "bytes_down"] += 1
    with pytest.raises(InvariantError, match="bytes_down"):
        _check(w, m)


def test_a_participant_busy_longer_than_its_round_is_caught():
    w, m = _world(tiny())
    _check(w, m)
    log = w.recorder.rounds[1]
    i = int(np.flatnonzero(log.selected)[0])
    log.comm_time[i] += 10 * log.round_time
    with pytest.raises(InvariantError, match="longer than its round"):
        _check(w, m)
