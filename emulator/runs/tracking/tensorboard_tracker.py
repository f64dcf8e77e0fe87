"""The `tensorboard` callback: every metrics row as TensorBoard scalars (step = round), in
event files under the run directory's `tensorboard/` (or `dir` when given), written with
torch's SummaryWriter. `tensorboard --logdir runs/` then shows every run."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field

from ..callbacks import Callback, RunContext, numeric_items
from ...registry import Params, register
from . import need


class TensorboardParams(Params):
    dir: Optional[str] = Field(None, description="folder of the event files (default: tensorboard/ in the run directory)")


@register("callback", "tensorboard", TensorboardParams,
          "TensorBoard event files: metrics per round as scalars (default: <run dir>/tensorboard)")
class TensorboardCallback(Callback):
    def __init__(self, p: Optional[TensorboardParams] = None):
        self.p = p or TensorboardParams()

    def on_start(self, run: RunContext) -> None:
        need("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter
        self.dir = Path(self.p.dir) if self.p.dir else run.files / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir))

    def after_aggregation(self, run: RunContext, row: dict) -> Optional[bool]:
        self._log(run, row)
        return None

    def after_evaluation(self, run: RunContext, row: dict) -> Optional[bool]:
        if row["round"] == 0:
            self._log(run, row)
        return None

    def _log(self, run: RunContext, row: dict) -> None:
        multi = len(run.world.tasks) > 1
        for k, v in numeric_items(row):
            self.writer.add_scalar(f"model{row['model']}/{k}" if multi else k, v, global_step=int(row["round"]))

    def on_end(self, run: RunContext, summary: dict) -> None:
        self.writer.close()
        summary.setdefault("tracking", {})["tensorboard"] = {"dir": "tensorboard" if not self.p.dir else self.p.dir}
