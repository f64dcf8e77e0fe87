"""The post-run invariant check (DESIGN.md section 3) catches each kind of corruption it
claims to, lists every violation together, and a run that fails it leaves no run directory."""
import pytest

from emulator import invariants, runner, scenario
from emulator.errors import InvariantError
from emulator.sim.world import World

from conftest import tiny


def _world():
    w = World(scenario.load(tiny()))
    w.run()
    return w, w.recorder.metrics_frame(), w.recorder.clients_frame()


def test_a_clean_run_passes_every_check():
    w, m, c = _world()
    ran = invariants.check(w, m, c)
    assert {"time_monotone", "weights", "steps_fit", "bytes", "comm_latency", "grad_steps"} <= set(ran)


@pytest.mark.parametrize("corrupt, message", [
    (lambda w, m: w.recorder.rounds[1].weight.__setitem__(slice(None), 0.5), "weights sum to"),
    (lambda w, m: m.__setitem__("virtual_time", m["virtual_time"].to_numpy()[::-1].copy()), "virtual_time decreases"),
    (lambda w, m: w.recorder.rounds[0].compute_time.__setitem__(slice(None), 0.01), "steps in"),
    (lambda w, m: w.recorder.rounds[2].comm_time.__setitem__(slice(None), 0.001), "2 x latency"),
    (lambda w, m: setattr(w.executor.stats, "steps_computed", 10**6), "steps computed but only"),
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
