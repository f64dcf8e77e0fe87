"""Evaluation of the global model: test metrics every eval_every, and with run.eval_train the
loss and accuracy over the whole training set (FedSUM's training-loss curves)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from emulator.scenario import schema as scenario
from emulator.sim.world import World

from conftest import tiny


def test_eval_train_is_the_global_models_loss_on_every_training_sample():
    w = World(scenario.load(tiny(**{"run.eval_train": True, "run.eval_every": 2, "run.rounds": 4})))
    w.run()
    rows = {r["round"]: r for r in w.recorder.metrics}
    assert "full_train_loss" not in rows[1] and "full_train_loss" in rows[2]
    task = w.tasks[0]
    x = torch.as_tensor(task.data.x_train)
    y = torch.as_tensor(task.data.y_train)
    with torch.no_grad():
        out = task.net.forward(task.algorithm.global_params(), x)
    assert rows[4]["full_train_loss"] == pytest.approx(float(F.cross_entropy(out, y)), rel=1e-6)
    assert rows[4]["full_train_acc"] == pytest.approx(float((out.argmax(1) == y).double().mean()), abs=1e-12)
    assert len(y) > 1000 and rows[4]["full_train_loss"] != pytest.approx(rows[4]["test_loss"], rel=1e-3)


def test_no_train_evaluation_by_default():
    w = World(scenario.load(tiny()))
    w.run()
    assert not any("full_train_loss" in r for r in w.recorder.metrics)
