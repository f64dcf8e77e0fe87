"""Load run directories into pandas."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml


@dataclass
class Run:
    dir: Path
    config: dict
    metrics: pd.DataFrame
    clients: pd.DataFrame
    summary: dict

    @property
    def name(self) -> str:
        return self.summary.get("name", self.dir.name)


def is_run_dir(path) -> bool:
    p = Path(path)
    return (p / "summary.json").exists() and (p / "metrics.csv").exists()


def load_run(path, clients: bool = True) -> Run:
    p = Path(path)
    if not is_run_dir(p):
        raise FileNotFoundError(f"{p} is not a flemu run directory (no summary.json / metrics.csv)")
    cfg = yaml.safe_load((p / "config.yaml").read_text()) if (p / "config.yaml").exists() else {}
    cl = pd.read_csv(p / "clients.csv") if clients and (p / "clients.csv").exists() else pd.DataFrame()
    return Run(p, cfg, pd.read_csv(p / "metrics.csv"), cl, json.loads((p / "summary.json").read_text()))
