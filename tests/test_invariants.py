"""The post-run invariant check (DESIGN.md section 3) catches each kind of corruption it
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


def test_a_clean_run_passes_every_check():
    w, m, c = _world()
    ran = invariants.check(w, m, c)
    assert {"time_monotone", "aggregations", "weights", "steps_fit", "bytes", "comm_latency", "delay",
            "grad_steps"} <= set(ran)


@pytest.mark.parametrize("corrupt, message", [
    (lambda w, m: w.recorder.rounds[1].weight.__setitem__(slice(None), 0.5), "weights sum to"),
    (lambda w, m: m.__setitem__("virtual_time", m["virtual_time"].to_numpy()[::-1].copy()), "virtual_time decreases"),
    (lambda w, m: w.recorder.rounds[0].compute_time.__setitem__(slice(None), 0.01), "steps in"),
    (lambda w, m: w.recorder.rounds[2].comm_time.__setitem__(slice(None), 0.001), "2 x latency"),
    (lambda w, m: setattr(w.executor.stats, "steps_computed", 10**6), "steps computed but only"),
    (lambda w, m: w.recorder.rounds.append(w.recorder.rounds[1]), "recorded as two aggregations"),
    (lambda w, m: setattr(w.recorder.rounds[2], "aggregation", False), "without their clients"),
    (lambda w, m: m.__setitem__("tau", m["tau"] + 1), "differs from the delay clients.csv gives"),
])
def test_each_corruption_is_caught(corrupt, message):
    w, m, c = _world()
    corrupt(w, m)
    with pytest.raises(InvariantError, match=message):
        invariants.check(w, m, c)


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
