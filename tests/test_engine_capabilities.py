"""Declared capabilities (docs/engine.md, "Declared extension points"), read from real runs."""
import pytest

from emulator.scenario import schema as scenario
from emulator.algorithms.base import BackgroundTraining, VersionedModel
from emulator.algorithms.fedavg import FedAvg
from emulator.sim.world import World

from conftest import tiny


class OwnAggregate(FedAvg):
    """A user's FedAvg with its own aggregation: it must be called, not FedAvg's cohort path."""

    def aggregate(self, t, arrivals):
        agg = super().aggregate(t, arrivals)
        agg.round_cols = {"own_aggregate": len(arrivals)}
        return agg


@pytest.mark.parametrize("engine", ["process", "vector"])
def test_a_fedavg_subclass_overriding_aggregate_is_honoured(engine):
    w = World(scenario.load(tiny(**{"protocol.engine": engine})))
    w.tasks[0].algorithm.__class__ = OwnAggregate
    w.run()
    assert w.protocol.engine == engine and not OwnAggregate.cohort_path and FedAvg.cohort_path
    rows = w.recorder.metrics[1:]
    # every round's aggregation went through the subclass, with its 3 participants
    assert [r["own_aggregate"] for r in rows] == [r["participants"] for r in rows] == [3, 3, 3]


def test_capabilities_are_declared_types():
    fedumf = World(scenario.load(tiny(**{"algorithm": {"name": "fedumf", "lr": 0.1}})))
    assert isinstance(fedumf.tasks[0].algorithm, BackgroundTraining)
    assert fedumf.protocol.vector_blockers() == ["the algorithm trains unselected clients in the background"]
    fedasync = World(scenario.load(tiny(**{"protocol": {"name": "async", "local_steps": 1},
                                           "algorithm": {"name": "fedasync", "lr": 0.1}})))
    assert isinstance(fedasync.tasks[0].algorithm, VersionedModel) and fedasync.recorder.per_job
    assert not isinstance(World(scenario.load(tiny())).tasks[0].algorithm, (BackgroundTraining, VersionedModel))


def test_after_aggregation_callbacks_add_columns_and_see_the_recorded_row():
    w = World(scenario.load(tiny(**{"run.eval_every": 2})))
    seen = []
    w.protocol.before_record.append(lambda world, done: done.row.update(twice_round=2 * done.round))
    w.protocol.after_record.append(lambda world, done: seen.append((done.round, "test_acc" in done.row)))
    w.run()
    assert [r["twice_round"] for r in w.recorder.metrics[1:]] == [2, 4, 6]
    # after_record sees the row as recorded: evaluated at rounds 2 and 3 (eval_every 2, last round)
    assert seen == [(1, False), (2, True), (3, True)]
