"""What a finished run's status says, and the exit status of `flemu run` (docs/reliability.md,
"Statuses and contracts").

The world ends a run `complete`, `stalled`, `stopped`, `diverged` or `failed` (a component
broke its contract: boundary/). Once its results are recorded, `settle` adds what the records
themselves say:

- `invalid`: a post-run invariant failed (a flemu bug); the results are kept, every
  violation listed under `invariant_failures`;
- `empty`: a run that would be `complete` in which no aggregation weighed any client;
- `empty_rounds`: the rounds whose aggregation weighed nobody (a warning whenever any).
"""
from __future__ import annotations

#: exit status of `flemu run` per run status (docs/bad-input.md, "Exit statuses")
EXIT = {"complete": 0, "stalled": 0, "stopped": 0, "empty": 0, "failed": 2, "diverged": 3, "invalid": 4}


def weighed(world) -> list:
    """(round, whether it weighed any client) for each aggregation of the run, in order. A
    round that weighed nobody (all weights 0): no client met the deadline, none was online,
    every upload was filtered."""
    return [(int(log.round), bool((log.weight > 0).any())) for log in world.recorder.aggregations()]


def settle(world, summary: dict, failures: list) -> None:
    """Mark `summary` from the records: `empty_rounds` always, then `invalid` (with
    `invariant_failures`) or `empty` where they apply, and a failed run's `error`."""
    aggs = weighed(world)
    summary["empty_rounds"] = sorted({r for r, any_client in aggs if not any_client})   # each round once
    if world.error is not None:
        summary["error"] = world.error.record()
    if failures:
        summary["invariant_failures"] = list(failures)
        why = f": {summary['message']}" if summary["message"] else ""
        before = f" (the run itself ended {summary['status']}{why})"
        summary["status"] = "invalid"
        summary["message"] = (f"post-run invariant check failed (a flemu bug; the results are kept, not to be "
                              f"trusted){before}: " + "; ".join(failures))
        return
    if summary["status"] == "complete" and not any(any_client for _, any_client in aggs):
        summary["status"] = "empty"
        summary["message"] = ("no aggregation weighed any client: "
                              + (f"all {world.rounds_done} rounds aggregated nobody" if world.rounds_done
                                 else "no round was aggregated")
                              + " (did any client meet the deadline, or was any online?)")


def warnings(summary: dict) -> list:
    """The warnings `flemu run` prints for a run (its summary)."""
    out = []
    rounds = summary.get("empty_rounds") or []
    if rounds and summary.get("status") != "empty":
        shown = ", ".join(map(str, rounds[:10])) + (", ..." if len(rounds) > 10 else "")
        out.append(f"warning: {len(rounds)} of {summary.get('rounds')} rounds aggregated nobody (rounds {shown}): "
                   "no client's update was weighed in them")
    if summary.get("status") == "empty":
        out.append(f"warning: {summary.get('message')}")
    return out
