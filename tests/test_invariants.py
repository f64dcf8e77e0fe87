"""The post-run invariant check (docs/architecture.md section 3) catches each kind of corruption it
claims to, lists every violation together, and a run that fails it leaves no run directory."""
import numpy as np
import pytest

from emulator import invariants, runner, scenario
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


def test_violations_are_listed_together_and_no_run_dir_is_written(tmp_path, monkeypatch):
    real_run = World.run

    def broken(self):
        real_run(self)
        for log in self.recorder.rounds:
            log.weight[:] = 0.5
        self.executor.stats.steps_computed = 10**6

    monkeypatch.setattr(World, "run", broken)
    out = tmp_path / "run"
    with pytest.raises(InvariantError) as e:
        runner.run(tiny(), out=out)
    text = str(e.value)
    assert text.count("weights sum to") == 3 and "steps computed but only" in text
    assert not out.exists() and not any(tmp_path.iterdir())


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
