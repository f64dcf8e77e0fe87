"""Run callbacks (emulator/runs/callbacks.py): called after each aggregation and each evaluation and at
the end; one may stop the run (status `stopped`, `stopped_by` naming it) or checkpoint; the
built-in MLflow and TensorBoard trackers record exactly what metrics.csv holds (read back with
the real libraries)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import emulator
from conftest import quadratic_scenario, tiny
from emulator.api import Callback, Params, register


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny models: one thread is fastest


class Recorder(Callback):
    def __init__(self, stop_at=None, checkpoint=False):
        self.aggregations, self.evaluations, self.ended = [], [], None
        self.stop_at, self.checkpoint = stop_at, checkpoint

    def after_aggregation(self, run, row):
        self.aggregations.append(row["round"])
        return self.stop_at is not None and row["round"] >= self.stop_at

    def after_evaluation(self, run, row):
        self.evaluations.append((row["round"], row["test_loss"]))
        if self.checkpoint:
            run.checkpoint()

    def on_end(self, run, summary):
        self.ended = summary["status"]
        summary["recorder_saw"] = len(self.aggregations)


def test_callbacks_see_every_aggregation_and_evaluation(tmp_path):
    sc = quadratic_scenario(rounds=6)
    sc["run"]["eval_every"] = 2
    cb = Recorder(checkpoint=True)
    res = emulator.run(sc, out=tmp_path / "r", callbacks=[cb])
    m = res.metrics
    assert cb.aggregations == [1, 2, 3, 4, 5, 6]
    ev = m.dropna(subset=["test_loss"])
    assert [r for r, _ in cb.evaluations] == ev["round"].tolist() == [0, 2, 4, 6]
    np.testing.assert_array_equal([v for _, v in cb.evaluations], ev["test_loss"].to_numpy())
    assert cb.ended == "complete"
    s = json.loads((res.run_dir / "summary.json").read_text())
    assert s["recorder_saw"] == 6 and "stopped_by" not in s
    ck = sorted(p.name for p in (res.run_dir / "checkpoints").iterdir())
    assert ck == ["round_0.npy", "round_2.npy", "round_4.npy", "round_6.npy"]
    np.testing.assert_array_equal(np.load(res.run_dir / "checkpoints" / "round_6.npy"),
                                  np.load(res.run_dir / "model.npy"))      # both in the run's dtype
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())     # no staging left behind


def test_a_callback_stops_the_run_cleanly(tmp_path):
    cb = Recorder(stop_at=3)
    cb.label = "early_stop"
    res = emulator.run(quadratic_scenario(rounds=10), out=tmp_path / "r", callbacks=[cb])
    s = json.loads((res.run_dir / "summary.json").read_text())
    assert s["status"] == "stopped" and s["stopped_by"] == "early_stop" and s["rounds"] == 3
    assert "stopped by callback 'early_stop' after round 3" in s["message"]
    assert pd.read_csv(res.run_dir / "metrics.csv")["round"].tolist() == [0, 1, 2, 3]
    assert cb.ended == "stopped"
    # a stopped run is a run directory flemu wrote: running again into it replaces it
    again = emulator.run(quadratic_scenario(rounds=2), out=tmp_path / "r")
    assert again.summary["status"] == "complete" and again.summary["rounds"] == 2
    assert pd.read_csv(tmp_path / "r" / "metrics.csv")["round"].tolist() == [0, 1, 2]


class StopBelowParams(Params):
    loss: float


class StopBelow(Callback):
    def __init__(self, p):
        self.p = p

    def after_evaluation(self, run, row):
        if row["round"] > 0 and row["test_loss"] < self.p.loss:
            run.stop(f"test loss {row['test_loss']:.4g} < {self.p.loss}")
        return None


@pytest.fixture
def stop_below():
    """`stop_below` registered for one test (the registry is shared by the tests of a worker)."""
    from emulator import registry
    register("callback", "stop_below", StopBelowParams, "stop once the test loss is below `loss`")(StopBelow)
    yield
    del registry._TABLES["callback"]["stop_below"]
    registry._generation += 1


def test_scenario_callbacks_are_registered_names_with_params(tmp_path, stop_below):
    full = emulator.run(quadratic_scenario(rounds=10), out=tmp_path / "full").metrics
    target = float(full["test_loss"].iloc[4])             # reached after round 4
    sc = quadratic_scenario(rounds=10)
    sc["callbacks"] = [{"name": "stop_below", "loss": target + 1e-9 * abs(target)}]
    res = emulator.run(sc, out=tmp_path / "r")
    assert res.summary["status"] == "stopped" and res.summary["stopped_by"] == "stop_below"
    assert res.summary["rounds"] == 4 and "test loss" in res.summary["message"]
    with pytest.raises(emulator.ScenarioError) as e:
        emulator.load({**sc, "callbacks": [{"name": "stop_belo", "loss": 1.0}]})
    assert "callbacks[0].name" in str(e.value) and "did you mean 'stop_below'" in str(e.value)


def test_mlflow_records_metrics_csv(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient
    monkeypatch.chdir(tmp_path)                            # the default store: ./mlruns
    sc = tiny()
    sc["callbacks"] = [{"name": "mlflow", "experiment": "flemu-test"}]
    res = emulator.run(sc, out=tmp_path / "run")
    s = json.loads((res.run_dir / "summary.json").read_text())["tracking"]["mlflow"]
    assert s["tracking_uri"] == (tmp_path / "mlruns").as_uri() and (tmp_path / "mlruns").is_dir()
    client = MlflowClient(tracking_uri=s["tracking_uri"])
    m = pd.read_csv(res.run_dir / "metrics.csv")
    for col in ("test_acc", "test_loss", "bytes_up", "virtual_time"):
        hist = sorted((x.step, x.value) for x in client.get_metric_history(s["run_id"], col))
        want = m.dropna(subset=[col])
        assert [h[0] for h in hist] == want["round"].tolist()
        np.testing.assert_array_equal([h[1] for h in hist], want[col].to_numpy(dtype=float))
    run = client.get_run(s["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["flemu.status"] == "complete"
    assert run.data.params["algorithm.lr"] == "0.1"
    # a tracking URI given in the scenario
    sc["callbacks"] = [{"name": "mlflow", "tracking_uri": (tmp_path / "store").as_uri()}]
    res = emulator.run(sc, out=tmp_path / "run2")
    got = MlflowClient(tracking_uri=(tmp_path / "store").as_uri()).get_metric_history(
        res.summary["tracking"]["mlflow"]["run_id"], "test_acc")
    assert len(got) == len(m)


def test_tensorboard_event_files_hold_metrics_csv(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    sc = tiny()
    sc["callbacks"] = [{"name": "tensorboard"}]
    res = emulator.run(sc, out=tmp_path / "run")
    ea = EventAccumulator(str(res.run_dir / "tensorboard"))
    ea.Reload()
    m = pd.read_csv(res.run_dir / "metrics.csv")
    for col in ("test_acc", "train_loss", "bytes_down"):
        ev = ea.Scalars(col)
        want = m.dropna(subset=[col])
        assert [e.step for e in ev] == want["round"].tolist()
        np.testing.assert_allclose([e.value for e in ev], want[col].to_numpy(dtype=float), rtol=1e-6)   # float32
