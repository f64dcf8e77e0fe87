"""The post-run invariant check (docs/architecture.md section 3) catches each kind of corruption it
claims to, lists every violation together, and a run that fails it is kept, marked `invalid`."""
import json

import numpy as np
import pandas as pd
import pytest

from emulator.runs import invariants, runner
from emulator.scenario import schema as scenario
from emulator.errors import InvariantError
from emulator.sim.world import World

from conftest import tiny


def _world(sc=None):
    w = World(scenario.load(sc or tiny()))
    w.run()
    m = w.recorder.metrics_frame()
    runner.add_delay_metrics(w, m)
    return w, m, w.recorder.clients_frame()


ALL_CHECKS = ["time_monotone", "aggregations", "weights", "steps_fit", "bytes", "round_time", "comm_latency",
              "delay", "grad_steps"]


def test_a_clean_run_passes_every_check(tmp_path):
    """A clean run: every check runs and passes, and summary.json lists exactly those."""
    import json
    w, m, c = _world()
    ran = invariants.check(w, m, c)
    assert sorted(ran) == sorted(ALL_CHECKS) and len(ran) == len(set(ran))
    res = runner.run(tiny(), out=tmp_path / "run")
    assert json.loads((res.run_dir / "summary.json").read_text())["invariants_checked"] == ran


def _weighted(log):
    """Index of the first client the round's aggregation weighted."""
    return int(np.flatnonzero(log.weight > 0)[0])


def _plus_one(message):
    numel, nb, direction = message
    return numel, nb + 1, direction


@pytest.mark.parametrize("corrupt, message", [
    (lambda w, m: w.recorder.rounds[1].weight.__setitem__(slice(None), 0.5), "weights sum to"),
    (lambda w, m: w.recorder.rounds[1].weight.__setitem__(slice(None), 1.0), r"round 2: weights sum to 6, expected 1\.0$"),
    (lambda w, m: m.__setitem__("virtual_time", m["virtual_time"].to_numpy()[::-1].copy()), "virtual_time decreases"),
    (lambda w, m: w.recorder.rounds[0].compute_time.__setitem__(slice(None), 0.01), "steps in"),
    (lambda w, m: w.recorder.rounds[2].comm_time.__setitem__(slice(None), 0.001), "2 x latency"),
    (lambda w, m: setattr(w.executor.stats, "steps_computed", 10**6), "steps computed but only"),
    (lambda w, m: w.recorder.rounds.append(w.recorder.rounds[1]), "recorded as two aggregations"),
    (lambda w, m: setattr(w.recorder.rounds[2], "aggregation", False), "without their clients"),
    (lambda w, m: m.__setitem__("tau", m["tau"] + 1), "differs from the delay clients.csv gives"),
    (lambda w, m: w.recorder.rounds[1].dropped.__setitem__(_weighted(w.recorder.rounds[1]), True),
     "round 2: a dropped client has a non-zero weight"),
    (lambda w, m: setattr(w.recorder.rounds[2], "aggregation", False), "round 3: work no aggregation used has a weight"),
    (lambda w, m: w.recorder.rounds[0].messages.__setitem__(0, _plus_one(w.recorder.rounds[0].messages[0])),
     r"round 1: a message of 650 parameters counted as 2601 bytes"),
    (lambda w, m: w.recorder.rounds[1].bytes_up.__setitem__(_weighted(w.recorder.rounds[1]), 1),
     "round 2: bytes recorded per client do not add up to the messages sent"),
    (lambda w, m: w.recorder.rounds[0].compute_time.__setitem__(0, np.inf),
     "round 1: negative or non-finite compute_time"),
    (lambda w, m: w.recorder.rounds[0].compute_time.__setitem__(0, np.nan),
     "round 1: negative or non-finite compute_time"),
])
def test_each_corruption_is_caught(corrupt, message):
    w, m, c = _world()
    corrupt(w, m)
    with pytest.raises(InvariantError, match=message):
        invariants.check(w, m, c)


def _async_world():
    sc = tiny(**{"run.rounds": 6, "algorithm": {"name": "fedasync", "lr": 0.1}})
    sc["protocol"] = {"name": "async", "local_steps": 2}
    return _world(sc)


def test_a_job_neither_merged_nor_lost_is_caught():
    """Async records one row per job: each is merged (an aggregation) or lost (dropped)."""
    w, m, c = _async_world()
    invariants.check(w, m, c)
    log = w.recorder.rounds[3]
    assert log.aggregation and not log.dropped.any()
    log.aggregation = False
    with pytest.raises(InvariantError, match=f"round {log.round}: a job neither merged nor lost"):
        invariants.check(w, m, c)


def test_a_job_recorded_twice_in_clients_csv_is_caught():
    import pandas as pd
    w, m, c = _async_world()
    assert c["job"].min() >= 1 and not c.duplicated(["client", "job"]).any()
    twice = pd.concat([c, c.iloc[[2]]], ignore_index=True)
    with pytest.raises(InvariantError, match="a client job is recorded twice"):
        invariants.check(w, m, twice)


def test_violations_are_listed_together_and_the_run_is_kept_invalid(tmp_path, monkeypatch):
    """A failed post-run invariant never loses the run: its directory is written with every
    result, status `invalid` and every violation listed (summary.json `invariant_failures`)."""
    real_run = World.run

    def broken(self):
        real_run(self)
        for log in self.recorder.rounds:
            log.weight[:] = 0.5
        self.executor.stats.steps_computed = 10**6

    monkeypatch.setattr(World, "run", broken)
    out = tmp_path / "run"
    res = runner.run(tiny(), out=out)
    s = json.loads((out / "summary.json").read_text())
    assert s == res.summary and s["status"] == "invalid"
    fails = s["invariant_failures"]
    assert sum("weights sum to" in f for f in fails) == 3 and any("steps computed but only" in f for f in fails)
    assert s["message"].startswith("post-run invariant check failed") and "ended complete" in s["message"]
    assert len(pd.read_csv(out / "metrics.csv")) == s["rounds"] + 1 and (out / "clients.csv").exists()


@pytest.mark.parametrize("compute", [
    {"model": "lognormal", "mean_step_time": 0.1, "sigma": 0.5},
    {"model": "lognormal", "mean_step_time": 0.1, "sigma": 0.5, "redraw": "step"},
    {"model": "exponential", "mean_step_time": 0.1},
    {"model": "flops", "gflops": 0.001},
    {"model": "normal", "mean_step_time": 0.1, "std": 0.02},
    {"model": "uniform", "low": 0.05, "high": 0.2},
], ids=lambda c: c["model"] + ("-step" if c.get("redraw") == "step" else ""))
def test_steps_fit_holds_every_compute_model_to_its_realised_step_times(compute):
    """A round whose compute time was recorded as one step's time instead of all five is
    caught for every compute model, random and FLOP-based ones included (their lower bound
    used to be 0, so nothing was checked for them)."""
    sc = tiny()
    sc["clients"]["groups"][0]["compute"] = compute
    w, m, c = _world(sc)
    invariants.check(w, m, c)
    log = w.recorder.rounds[1]
    i = int(np.flatnonzero(log.steps == 5)[0])
    log.compute_time[i] /= 5
    with pytest.raises(InvariantError, match="steps in"):
        invariants.check(w, m, c)


# -- what mutation testing (docs/mutation.md) found unchecked --------------------------------------

def _clients_twice(w, m):
    """Round 2's log names client 0 on two rows (and client 1 on none)."""
    log = w.recorder.rounds[1]
    log.ids = np.array([0, 0, 2, 3, 4, 5])


def _no_aggregation(w, m):
    for log in w.recorder.rounds:
        log.aggregation = False
        log.weight[:] = 0


@pytest.mark.parametrize("corrupt, message", [
    (_clients_twice, r"two rows for one \(round, client\)$"),
    (_no_aggregation, r"model 0 \(.*\) was never aggregated"),
    # the first three of seven, in order, on both sides
    (_no_aggregation, r"aggregations recorded in clients.csv \[\] without a metrics row, "
                      r"metrics rows \[\(1, 0\), \(2, 0\), \(3, 0\)\] without their clients"),
    (lambda w, m: m.__setitem__("round", 0),                    # no metrics row of a round
     r"aggregations recorded in clients.csv \[\(1, 0\), \(2, 0\), \(3, 0\)\] without a metrics row, "
     r"metrics rows \[\] without their clients"),
    (lambda w, m: m.__setitem__("tau", m["tau"] + 1),
     r"model 0: metrics.csv tau \[2. 3. 3. 3. 4. 4.\]\.\.\. differs from the delay clients.csv gives \[1 2 2 2 3 3\]\.\.\.$"),
])
def test_seven_round_corruptions_are_caught_and_named(corrupt, message):
    """Messages list the first three (round, model) keys, the first six values."""
    w, m, c = _world(tiny(**{"run.rounds": 7}))
    corrupt(w, m)
    with pytest.raises(InvariantError, match=message):
        invariants.check(w, m, c)


def test_a_round_client_key_that_wraps_is_no_duplicate():
    """(round, client) pairs are told apart in a run longer than the fleet is wide: 2 clients,
    4 rounds, every client on every round's row."""
    w, m, c = _world(tiny(**{"clients.count": 2, "run.rounds": 4, "protocol.select.k": 2}))
    assert [log.n for log in w.recorder.rounds] == [2, 2, 2, 2]
    assert invariants.check(w, m, c) == ALL_CHECKS


@pytest.mark.parametrize("corrupt, message", [
    (lambda log: log.extra["job"].__setitem__(0, 0), "rows without a job key"),
    (lambda log: log.extra.pop("job"), "rows without a job key"),
    (lambda log: setattr(log, "aggregation", False), "a job neither merged nor lost"),
])
def test_a_per_job_violation_is_named_once_with_its_first_round(corrupt, message):
    """Every job row has a job key (>= 1); the check names the first offending round, once,
    however many follow."""
    w, m, c = _async_world()
    merged = [log for log in w.recorder.rounds if log.aggregation and not log.dropped.any()]
    for log in merged[1:3]:
        corrupt(log)
    with pytest.raises(InvariantError) as e:
        invariants.check(w, m, c)
    assert str(e.value).count(message) == 1 and f"round {merged[1].round}: {message}" in str(e.value)


def test_rows_that_are_no_job_may_repeat_a_client():
    """clients.csv rows with job 0 belong to no job: two of them for one client are no
    duplicate job."""
    import pandas as pd
    w, m, c = _async_world()
    extra = c.iloc[[0, 0]].assign(job=0, weight=0.0)
    invariants.check(w, m, pd.concat([c, extra], ignore_index=True))


def _one_byte_more(log):
    log.bytes_up[_weighted(log)] += 1


def _twice(corrupt):
    """Apply `corrupt(w, i)` to rounds 1 and 2 (or their first two messages)."""
    return lambda w: [corrupt(w, i) for i in (0, 1)]


@pytest.mark.parametrize("corrupt, kind, first", [
    (lambda w: w.recorder.rounds.extend(w.recorder.rounds[:2]), "recorded as two aggregations",
     "round 1 of model 0 is recorded as two aggregations"),
    (_twice(lambda w, i: w.recorder.rounds[i].compute_time.__setitem__(slice(None), 0.01)), "steps in",
     "round 1 client 0: 5 steps in 0.01s < 0.5s"),
    (_twice(lambda w, i: w.recorder.rounds[0].messages.__setitem__(i, _plus_one(w.recorder.rounds[0].messages[i]))),
     "a message of", "round 1: a message of 650 parameters counted as 2601 bytes"),
    (lambda w: w.recorder.rounds[2].comm_time.__setitem__(slice(None), 0.001), "2 x latency",
     "round 3 client 2: comm_time 0.001s < 2 x latency"),          # round 3's uploaders: clients 2, 4, 5
    # clients.csv's bytes of rounds 2 and 3 one more than the messages and metrics.csv say
    (_twice(lambda w, i: _one_byte_more(w.recorder.rounds[i + 1])),
     "metrics bytes_up/bytes_down", "round 2: metrics bytes_up/bytes_down 7800/7800 != clients 7801/7800"),
])
def test_a_violation_in_several_rounds_is_named_once_with_the_first(corrupt, kind, first):
    """One line per kind of violation, naming the first round (or message) that has it."""
    w, m, c = _world()
    corrupt(w)
    with pytest.raises(InvariantError) as e:
        invariants.check(w, m, c)
    assert first in str(e.value) and str(e.value).count(kind) == 1, str(e.value)


def test_multi_model_weights_are_checked_past_the_idle_logs():
    """A multi-model run records each round's idle clients first; the weight check skips those
    logs and still reaches the models' rounds."""
    sc = tiny(**{"clients.count": 4, "run.rounds": 2})
    wl = sc.pop("workload")
    sc["workloads"] = [wl, dict(wl)]
    sc["protocol"] = {"name": "multi_model", "assignment": "mfa_rr", "local_steps": 2}
    w, m, c = _world(sc)
    invariants.check(w, m, c)
    log = w.recorder.rounds[-1]
    assert w.recorder.rounds[0].kind == "idle" and log.kind != "idle" and log.round == 2
    log.weight[log.weight > 0] = 0.9
    with pytest.raises(InvariantError, match="round 2: weights sum to"):
        invariants.check(w, m, c)


def test_a_run_with_lost_jobs_passes_every_check():
    """Async under churn: jobs lost to a client going offline are recorded as dropped rows of
    no aggregation, with weight 0, and pass every check."""
    sc = tiny(**{"run.rounds": 12, "algorithm": {"name": "fedasync", "lr": 0.1}})
    sc["protocol"] = {"name": "async", "local_steps": 2}
    sc["clients"]["groups"][0]["availability"] = {"model": "markov_time", "mean_on": 1.0, "mean_off": 0.5}
    w, m, c = _world(sc)
    lost = [log for log in w.recorder.rounds if not log.aggregation]
    assert lost and all(log.dropped.all() and (log.weight == 0).all() for log in lost)
    assert (c["drop_reason"] == "offline").sum() == len(lost)
    assert invariants.check(w, m, c) == ALL_CHECKS


def test_a_participant_busy_longer_than_its_round_is_caught():
    """Round 2 recorded as lasting only its compute time (5 steps x 0.1 s): each participant was
    also busy 2 x 0.01 s latency + 2 x 2600 bytes at 10 Mbit/s."""
    w, m, c = _world()
    log = w.recorder.rounds[1]
    assert log.round_time == pytest.approx(0.5 + 0.02 + 2 * 2600 * 8 / 10e6, abs=1e-12)
    log.round_time = 0.5
    with pytest.raises(InvariantError, match=r"round 2: a participant busy 0\.52416s, longer than its round \(0\.5s\)"):
        invariants.check(w, m, c)


def test_the_delay_check_reads_a_round_without_participants_as_such():
    """tau is recomputed from clients.csv: with nobody weighted in round 1 (clients 0, 2, 4
    were), client 0 never took part, so tau = 1, 2, 3; metrics.csv saying so passes, the
    run's own 1, 2, 2 no longer does."""
    w, m, c = _world()
    assert m.loc[m["round"] >= 1, "tau"].tolist() == [1, 2, 2]
    c.loc[c["round"] == 1, "weight"] = 0.0
    with pytest.raises(InvariantError, match=r"gives \[1 2 3\]"):
        invariants.check(w, m, c)
    m.loc[m["round"] >= 1, "tau"] = [1, 2, 3]
    assert invariants.check(w, m, c) == ALL_CHECKS


def test_multi_model_delay_is_checked_per_model():
    """A model-1 row of clients.csv unweighted: model 1's tau is wrong, model 0's is not."""
    sc = tiny(**{"clients.count": 4, "run.rounds": 2})
    wl = sc.pop("workload")
    sc["workloads"] = [wl, dict(wl)]
    sc["protocol"] = {"name": "multi_model", "assignment": "mfa_rr", "local_steps": 2}
    w, m, c = _world(sc)
    first = c[(c["model"] == 1) & (c["round"] == 1) & (c["weight"] > 0)].index[0]
    c.loc[first, "weight"] = 0.0
    with pytest.raises(InvariantError) as e:
        invariants.check(w, m, c)
    assert "model 1: metrics.csv tau" in str(e.value) and "model 0:" not in str(e.value)
