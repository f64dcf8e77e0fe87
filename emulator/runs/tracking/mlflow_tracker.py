"""The `mlflow` callback: every metrics row to an MLflow run (step = round), the scenario's
scalar fields as params, the summary's figures and status at the end. Without a tracking
URI it writes MLflow's local file store `./mlruns` (absolute, in the working directory; MLflow 3
keeps that store behind MLFLOW_ALLOW_FILE_STORE, which a file: URI sets);
summary.json records {tracking_uri, experiment_id, run_id} under `tracking.mlflow`."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

from pydantic import Field

from ..callbacks import Callback, RunContext, numeric_items
from ...registry import Params, register
from . import need


class MlflowParams(Params):
    tracking_uri: Optional[str] = Field(None, description="MLflow tracking URI (default: the local file store ./mlruns)")
    experiment: Optional[str] = Field(None, description="experiment name (default: the scenario's name)")
    run_name: Optional[str] = Field(None, description="MLflow run name (default: the run directory's name)")
    log_params: bool = Field(True, description="log the scenario's scalar fields as MLflow params")


def _flat(d, prefix="") -> dict:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out.update(_flat(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = d
    return out


@register("callback", "mlflow", MlflowParams,
          "MLflow tracking: metrics per round, scenario params, summary (default store ./mlruns)")
class MlflowCallback(Callback):
    def __init__(self, p: Optional[MlflowParams] = None):
        self.p = p or MlflowParams()

    def on_start(self, run: RunContext) -> None:
        need("mlflow", "mlflow")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient
        from ...scenario.schema import dump
        self.uri = self.p.tracking_uri or Path("mlruns").resolve().as_uri()
        if self.uri.startswith("file:"):
            # MLflow 3 keeps its file store behind this switch (maintenance mode, still
            # supported): flemu's embedded default is that store, so the switch is set here
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=self.uri)
        name = self.p.experiment or run.scenario.name
        self.experiment_id = self._experiment(name)
        out = Path(run.scenario.output.dir or run.scenario.name)
        r = self.client.create_run(self.experiment_id, run_name=self.p.run_name or out.name,
                                   tags={"flemu.scenario": run.scenario.name})
        self.run_id = r.info.run_id
        if self.p.log_params:
            flat = {k: v for k, v in _flat(dump(run.scenario)).items() if k != "output.dir"}
            params = [Param(k[:250], str(v)[:6000]) for k, v in flat.items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(self.run_id, params=params[i:i + 100])

    def _experiment(self, name: str) -> str:
        got = self.client.get_experiment_by_name(name)
        if got is not None:
            return got.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:                    # noqa: BLE001 - created meanwhile by another run of a sweep
            got = self.client.get_experiment_by_name(name)
            if got is None:
                raise
            return got.experiment_id

    def after_aggregation(self, run: RunContext, row: dict) -> Optional[bool]:
        self._log(run, row)
        return None

    def after_evaluation(self, run: RunContext, row: dict) -> Optional[bool]:
        if row["round"] == 0:                # the initial model (later rows come with their aggregation)
            self._log(run, row)
        return None

    def _log(self, run: RunContext, row: dict) -> None:
        from mlflow.entities import Metric
        multi = len(run.world.tasks) > 1
        ts = int(time.time() * 1000)
        step = int(row["round"])
        ms = [Metric(f"model{row['model']}/{k}" if multi else k, v, ts, step) for k, v in numeric_items(row)]
        for i in range(0, len(ms), 1000):
            self.client.log_batch(self.run_id, metrics=ms[i:i + 1000])

    def on_end(self, run: RunContext, summary: dict) -> None:
        self.client.set_tag(self.run_id, "flemu.status", summary.get("status"))
        if summary.get("stopped_by"):
            self.client.set_tag(self.run_id, "flemu.stopped_by", summary["stopped_by"])
        self.client.set_terminated(self.run_id, "FINISHED" if summary.get("status") in ("complete", "stopped")
                                   else "FAILED")
        summary.setdefault("tracking", {})["mlflow"] = {"tracking_uri": self.uri, "experiment_id": self.experiment_id,
                                                        "run_id": self.run_id}
