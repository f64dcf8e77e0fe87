"""The scenario's `evaluation:` block: per-client evaluation (docs/fairness.md).

Absent, nothing is evaluated per client and every result is as without it. Given, each
client is evaluated on its own local test rows whenever the global model is evaluated
(`run.eval_every`, `run.eval_every_seconds`, the last round and round 0).
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BeforeValidator, Field

from .quantities import FiniteParams


def _clients(v):
    if v == "all":
        return v
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("must be `all` or a positive integer (a sample of that many clients per evaluation)")
    return v


class Evaluation(FiniteParams):
    """Per-client evaluation: each client's loss and accuracy on its own local test rows."""
    rows: Literal["holdout", "test"] = Field(
        "holdout", description="where each client's local test rows come from: `holdout` (a share of its own "
                               "partition, removed from its training rows) or `test` (the global test set split "
                               "among clients with the workload's partitioner)")
    holdout: float = Field(0.2, gt=0, lt=1, description="rows: holdout: the share of each client's rows held out "
                                                       "(rounded, at least 1, leaving at least 1 to train on)")
    clients: Annotated[Union[Literal["all"], int], BeforeValidator(_clients)] = Field(
        "all", description="`all`, or n: a sample of n clients (among those with test rows) drawn afresh at "
                           "every evaluation from the run's `evaluation` stream")
    charge: bool = Field(False, description="charge the evaluation in virtual time: each evaluated client's "
                                            "forward passes take one step of its compute model per batch of "
                                            "rows (clients.csv `eval_time`), and the next round starts when the "
                                            "slowest has finished (rounds and intervals only)")

    def fleet_problems(self, at, fleet):
        out = super().fleet_problems(at, fleet)
        if self.clients != "all" and self.clients > fleet.clients:
            out.append((f"{at}.clients", f"samples {self.clients} clients per evaluation, but clients.count is "
                                         f"{fleet.clients} (give `all` or at most {fleet.clients})"))
        return out
