"""Which executor path each job kind took, and why (summary.json `executor_paths`).

Every computed job is noted once with its path (`batched` or `sequential`) and the reason
its executor gave. The summary is keyed `"<algorithm>/<job kind>"` (the kind from the rule's
type, training.py; probe jobs are kind `probe`):

    {"fedavg/local_sgd": {"batched": {"jobs": 40, "steps": 200, "why": ["..."]}}}

Over all kinds but `probe`, `jobs` and `steps` add up to summary.json's `jobs_computed` and
`grad_steps_computed`.
"""
from __future__ import annotations

PROBE_KIND = "probe"


class PathLog:
    def __init__(self):
        self._rows: dict = {}        # (task, kind, path) -> [jobs, steps, {why}]

    def note(self, task: int, kind: str, path: str, why: str, steps: int) -> None:
        row = self._rows.setdefault((task, kind, path), [0, 0, set()])
        row[0] += 1
        row[1] += int(steps)
        row[2].add(why)

    def summary(self, algorithms: dict) -> dict:
        """{"<algorithm>/<kind>": {path: {"jobs", "steps", "why"}}}; `algorithms`: task -> name."""
        out: dict = {}
        for (task, kind, path), (jobs, steps, why) in sorted(self._rows.items()):
            entry = out.setdefault(f"{algorithms.get(task, task)}/{kind}", {}).setdefault(
                path, {"jobs": 0, "steps": 0, "why": []})
            entry["jobs"] += jobs
            entry["steps"] += steps
            entry["why"] = sorted(set(entry["why"]) | why)
        return out
